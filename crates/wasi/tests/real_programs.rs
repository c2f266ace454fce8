//! Real programs as VINO processes: SQLite (a shell over the amalgamation) and gzip/gunzip
//! (over zlib), built from crates' sources with the SDK, doing real file work on the kernel;
//! their results are checked against the host's gzip and SQLite's own integrity check, and the
//! image with fsck.

mod common;

use common::{boot, fsck, host, program, run};
use vino_kernel::Credentials;
use vino_wasi::Exit;

#[test]
fn sqlite_inserts_two_hundred_thousand_rows_and_checks_its_database() {
    let (dev, k) = boot();
    let sqlite = program("sqlite3");
    const ROWS: usize = 200_000;
    let mut script = String::from("CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, n INTEGER);\nBEGIN;\n");
    for i in 0..ROWS {
        script.push_str(&format!(
            "INSERT INTO t(name, n) VALUES('row {i}', {});\n",
            i * 7 % 1000
        ));
    }
    script.push_str("COMMIT;\nCREATE INDEX t_n ON t(n);\n");
    let (exit, out, err) = run(&k, &sqlite, &["sqlite3", "/data.db"], script.into_bytes());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(out.is_empty());
    // A second process opens the database the first one left.
    let (exit, out, err) = run(
        &k,
        &sqlite,
        &[
            "sqlite3",
            "/data.db",
            "PRAGMA integrity_check;",
            "SELECT count(*), sum(n) FROM t;",
            "SELECT name FROM t WHERE id = 12345;",
            "DELETE FROM t WHERE n < 500;",
            "SELECT count(*) FROM t;",
        ],
        Vec::new(),
    );
    assert_eq!(exit, Exit::Code(0), "{err}");
    let expect_sum: usize = (0..ROWS).map(|i| i * 7 % 1000).sum();
    let kept = (0..ROWS).filter(|i| i * 7 % 1000 >= 500).count();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text, format!("ok\n{ROWS}|{expect_sum}\nrow 12344\n{kept}\n"));
    // SQLite's errors come back as the program's.
    let (exit, _, err) = run(
        &k,
        &sqlite,
        &["sqlite3", "/data.db", "SELECT * FROM missing;"],
        Vec::new(),
    );
    assert_eq!(exit, Exit::Code(1));
    assert!(err.contains("no such table: missing"), "{err}");
    fsck(&dev, &k);
}

fn host_gzip(args: &[&str], input: &[u8]) -> Vec<u8> {
    host("gzip", args, input)
}

fn host_bzip2(args: &[&str], input: &[u8]) -> Vec<u8> {
    host("bzip2", args, input)
}

#[test]
fn gzip_and_gunzip_round_trip_with_the_hosts_gzip() {
    let (dev, k) = boot();
    let gzip = program("gzip");
    // Text with repeats and a stretch of noise, so both of deflate's ways are used.
    let mut data: Vec<u8> = (0..150_000)
        .flat_map(|i| format!("line {i} of the test\n").into_bytes())
        .collect();
    let mut x = 12345u32;
    data.extend((0..500_000).map(|_| {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        (x >> 16) as u8
    }));

    // VINO's gzip compresses a file on the image in place; the host's gunzip reads the result.
    let (exit, _, err) = run(&k, &gzip, &["gzip", "-c"], data.clone());
    assert_eq!(exit, Exit::Code(0), "{err}");
    let p = k.spawn(Credentials::root());
    let fd = p.open("/data", vino_kernel::OpenFlags::create()).unwrap();
    p.write(fd, &data).unwrap();
    p.close(fd).unwrap();
    let (exit, _, err) = run(&k, &gzip, &["gzip", "-9", "/data"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(p.stat("/data").is_err(), "gzip removes the original");
    let size = p.stat("/data.gz").unwrap().size as usize;
    assert!(size < data.len() / 2, "compressed: {size} bytes");
    let fd = p.open("/data.gz", vino_kernel::OpenFlags::read_only()).unwrap();
    let mut gz = vec![0u8; size];
    assert_eq!(p.read(fd, &mut gz).unwrap(), size);
    p.close(fd).unwrap();
    assert!(host_gzip(&["-dc"], &gz) == data, "the host's gunzip gets the data back");

    // The host's gzip output, decompressed in place by VINO's gunzip.
    let host = host_gzip(&["-c"], &data);
    let fd = p.open("/host.gz", vino_kernel::OpenFlags::create()).unwrap();
    p.write(fd, &host).unwrap();
    p.close(fd).unwrap();
    let (exit, _, err) = run(&k, &gzip, &["gunzip", "/host.gz"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{err}");
    let fd = p.open("/host", vino_kernel::OpenFlags::read_only()).unwrap();
    let mut back = vec![0u8; data.len() + 1];
    assert_eq!(p.read(fd, &mut back).unwrap(), data.len());
    assert!(back[..data.len()] == data[..], "VINO's gunzip gets the data back");
    p.close(fd).unwrap();

    // Input that is not gzip, or is cut short, is an error of the program's, not the kernel's.
    let (exit, _, err) = run(&k, &gzip, &["gunzip"], b"plain text".to_vec());
    assert_eq!(exit, Exit::Code(1), "{err}");
    assert!(err.contains("not in gzip format"), "{err}");
    let (exit, _, err) = run(&k, &gzip, &["gunzip"], host[..host.len() / 2].to_vec());
    assert_eq!(exit, Exit::Code(1), "{err}");
    assert!(err.contains("unexpected end of file"), "{err}");
    k.exit(p.pid());
    fsck(&dev, &k);
}

#[test]
fn bzip2_itself_compresses_in_place_and_the_host_agrees() {
    let (dev, k) = boot();
    let bzip2 = program("bzip2");
    let data: Vec<u8> = (0..120_000)
        .flat_map(|i| format!("{i} bottles\n").into_bytes())
        .collect();
    let p = k.spawn(Credentials::root());
    let fd = p.open("/data", vino_kernel::OpenFlags::create()).unwrap();
    p.write(fd, &data).unwrap();
    p.close(fd).unwrap();
    p.chmod("/data", 0o640).unwrap();
    // bzip2 1.0.8's own main: compresses /data into /data.bz2 and removes /data. (It would give
    // the new file the old one's mode, but WASI's stat has none: the new file keeps the
    // kernel's default; sdk/PORTING.md says why.)
    let (exit, _, err) = run(&k, &bzip2, &["bzip2", "-9", "/data"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(p.stat("/data").is_err());
    let st = p.stat("/data.bz2").unwrap();
    assert_eq!(st.mode & 0o7777, 0o644, "the kernel's mode, not WASI's zero");
    let fd = p.open("/data.bz2", vino_kernel::OpenFlags::read_only()).unwrap();
    let mut bz = vec![0u8; st.size as usize];
    assert_eq!(p.read(fd, &mut bz).unwrap(), bz.len());
    p.close(fd).unwrap();
    assert!(host_bzip2(&["-dc"], &bz) == data, "the host's bzip2 reads it");
    let (exit, _, err) = run(&k, &bzip2, &["bzip2", "-t", "/data.bz2"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "its own integrity test: {err}");

    // The host's output, decompressed by VINO's bunzip2 (bzip2 under that name).
    let (exit, out, err) = run(&k, &bzip2, &["bunzip2", "-c"], host_bzip2(&["-c"], &data));
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(out == data);
    // A damaged stream: bzip2's own error and status.
    let mut damaged = host_bzip2(&["-c"], &data);
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0xff;
    let (exit, _, err) = run(&k, &bzip2, &["bunzip2", "-c"], damaged);
    assert_eq!(exit, Exit::Code(2), "{err}");
    assert!(err.contains("Data integrity error"), "{err}");
    k.exit(p.pid());
    fsck(&dev, &k);
}

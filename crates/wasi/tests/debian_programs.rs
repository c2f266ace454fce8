//! Programs nobody on the project wrote, from Debian bookworm's source packages (lz4 1.9.4,
//! zstd 1.5.4, zlib 1.2.13's minigzip), built by the SDK with `vino build` flags only and run as
//! VINO processes on an in-memory disk: what they compress the host's tools decompress, and
//! the other way round, byte for byte. The sources come from `apt-get source` (scripts/setup.sh
//! makes that work) and the built modules from the build cache (`build_named_cached`), so a
//! second run builds nothing.

mod common;

use common::{boot, fsck, host, program, run};
use vino_kernel::{Credentials, OpenFlags, Process};
use vino_wasi::{Exit, Program, ProgramLimits};

fn put(p: &Process, path: &str, data: &[u8]) {
    let fd = p.open(path, OpenFlags::create()).unwrap();
    assert_eq!(p.write(fd, data).unwrap(), data.len());
    p.close(fd).unwrap();
}

fn get(p: &Process, path: &str) -> Vec<u8> {
    let size = p.stat(path).unwrap().size as usize;
    let fd = p.open(path, OpenFlags::read_only()).unwrap();
    let mut data = vec![0u8; size + 1];
    assert_eq!(p.read(fd, &mut data).unwrap(), size);
    p.close(fd).unwrap();
    data.truncate(size);
    data
}

/// About 2.5 MB: text with repeats, then noise, so both a compressor's matches and its
/// literals are used.
fn sample() -> Vec<u8> {
    let mut data: Vec<u8> = (0..120_000)
        .flat_map(|i| format!("line {i} of the sample, {}\n", i % 97).into_bytes())
        .collect();
    let mut x = 2_463_534_242u32;
    data.extend((0..400_000).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u8
    }));
    data
}

/// One compressor both ways: `compress` (file IN to file OUT), `decompress` (the same) and
/// `pipe` (stdin to stdout) are its arguments after its name; `host_d` / `host_c` the host
/// tool's for decompressing and compressing stdin to stdout.
struct Tool<'a> {
    name: &'a str,
    ext: &'a str,
    compress: &'a [&'a str],
    decompress: &'a [&'a str],
    pipe: &'a [&'a str],
    host_d: &'a [&'a str],
    host_c: &'a [&'a str],
}

/// `name` and `args`, with IN and OUT replaced by `input` and `output`.
fn with_files<'a>(name: &'a str, args: &[&'a str], input: &'a str, output: &'a str) -> Vec<&'a str> {
    let file = |a: &'a str| match a {
        "IN" => input,
        "OUT" => output,
        other => other,
    };
    std::iter::once(name).chain(args.iter().map(|a| file(a))).collect()
}

fn round_trips(t: &Tool<'_>) {
    let (dev, k) = boot();
    let prog = program(t.name);
    let data = sample();
    let p = k.spawn(Credentials::root());
    put(&p, "/data", &data);
    let packed = format!("/data{}", t.ext);

    // Compressed by VINO's, file to file: the host's gets the data back.
    let args = with_files(t.name, t.compress, "/data", &packed);
    let (exit, _, err) = run(&k, &prog, &args, Vec::new());
    assert_eq!(exit, Exit::Code(0), "{args:?}: {err}");
    let ours = get(&p, &packed);
    assert!(ours.len() < data.len() / 2, "compressed: {} bytes", ours.len());
    assert!(
        host(t.name, t.host_d, &ours) == data,
        "the host's {} reads ours",
        t.name
    );

    // Compressed by the host's, decompressed by VINO's, file to file.
    let host_packed = format!("/host{}", t.ext);
    put(&p, &host_packed, &host(t.name, t.host_c, &data));
    let args = with_files(t.name, t.decompress, &host_packed, "/host.out");
    let (exit, _, err) = run(&k, &prog, &args, Vec::new());
    assert_eq!(exit, Exit::Code(0), "{args:?}: {err}");
    assert!(get(&p, "/host.out") == data, "ours reads the host's");

    // Through a pipe: standard input to standard output.
    let mut args = vec![t.name];
    args.extend(t.pipe);
    let (exit, out, err) = run(&k, &prog, &args, data.clone());
    assert_eq!(exit, Exit::Code(0), "{args:?}: {err}");
    assert!(host(t.name, t.host_d, &out) == data, "the host's reads our pipe's");
    k.exit(p.pid());
    fsck(&dev, &k);
}

#[test]
fn lz4_round_trips_with_the_hosts_lz4() {
    round_trips(&Tool {
        name: "lz4",
        ext: ".lz4",
        compress: &["-q", "-9", "IN", "OUT"],
        decompress: &["-q", "-d", "IN", "OUT"],
        pipe: &["-q", "-c"],
        host_d: &["-dc"],
        host_c: &["-c"],
    });
}

#[test]
fn zstd_round_trips_with_the_hosts_zstd() {
    round_trips(&Tool {
        name: "zstd",
        ext: ".zst",
        compress: &["-q", "IN", "-o", "OUT"],
        decompress: &["-q", "-d", "IN", "-o", "OUT"],
        pipe: &["-q", "-c"],
        host_d: &["-dc"],
        host_c: &["-c"],
    });
}

#[test]
fn zlibs_minigzip_round_trips_with_the_hosts_gzip() {
    let (dev, k) = boot();
    let prog = program("minigzip");
    let data = sample();
    let p = k.spawn(Credentials::root());
    put(&p, "/data", &data);
    // In place, as gzip: /data becomes /data.gz, which the host's gunzip reads.
    let (exit, _, err) = run(&k, &prog, &["minigzip", "-9", "/data"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(p.stat("/data").is_err(), "minigzip removes the original");
    assert!(host("gzip", &["-dc"], &get(&p, "/data.gz")) == data);
    // The host's gzip, decompressed in place by minigzip -d.
    put(&p, "/host.gz", &host("gzip", &["-c"], &data));
    let (exit, _, err) = run(&k, &prog, &["minigzip", "-d", "/host.gz"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(get(&p, "/host") == data);
    // Through a pipe both ways.
    let (exit, out, err) = run(&k, &prog, &["minigzip"], data.clone());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(host("gzip", &["-dc"], &out) == data);
    let (exit, out, err) = run(&k, &prog, &["minigzip", "-d"], out);
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert!(out == data);
    k.exit(p.pid());
    fsck(&dev, &k);
}

/// `lz4 -t` and `zstd -t` decompress to /dev/null, the VINO process's own device.
#[test]
fn integrity_tests_write_to_dev_null() {
    let (_dev, k) = boot();
    let p = k.spawn(Credentials::root());
    let data = sample();
    for (name, ext) in [("lz4", "lz4"), ("zstd", "zst")] {
        let path = format!("/data.{ext}");
        put(&p, &path, &host(name, &["-c"], &data));
        let (exit, _, err) = run(&k, &program(name), &[name, "-q", "-t", &path], Vec::new());
        assert_eq!(exit, Exit::Code(0), "{name} -t: {err}");
    }
    k.exit(p.pid());
}

/// The SDK's compatibility layer on the kernel: chmod by path and by descriptor reaches the
/// file's mode, a mode of 0 (a copy of WASI's stat) changes nothing, chown is the kernel's to
/// allow, and umask answers as POSIX has it.
#[test]
fn the_compatibility_layer_changes_modes_and_owners_through_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("modes.c");
    std::fs::write(
        &src,
        r#"#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int main(void) {
    int fd = open("/f", O_RDWR);
    if (chmod("/f", 0640) != 0) { perror("chmod"); return 1; }
    if (fchmod(fd, 0) != 0) { perror("fchmod 0"); return 2; }
    if (chown("/f", 1000, 1000) != 0) { perror("chown"); return 3; }
    if (fchown(fd, -1, 2000) != 0) { perror("fchown"); return 4; }
    if (chmod("/missing", 0600) == 0 || errno != ENOENT) return 5;
    mode_t old = umask(077);
    printf("%o %o\n", (unsigned)old, (unsigned)umask(old));
    return 0;
}
"#,
    )
    .unwrap();
    let wasm = dir.path().join("modes.wasm");
    vino_sdk::build_program(&[src], &wasm, &Default::default()).unwrap();
    let prog = Program::compile(&std::fs::read(wasm).unwrap(), ProgramLimits::default()).unwrap();
    let (dev, k) = boot();
    let p = k.spawn(Credentials::root());
    put(&p, "/f", b"x");
    let (exit, out, err) = run(&k, &prog, &["modes"], Vec::new());
    assert_eq!(exit, Exit::Code(0), "{err}");
    assert_eq!(String::from_utf8(out).unwrap(), "22 77\n");
    let st = p.stat("/f").unwrap();
    assert_eq!((st.mode & 0o7777, st.uid, st.gid), (0o640, 1000, 2000));
    k.exit(p.pid());
    fsck(&dev, &k);
}

/// The pipeline `zstd -dc f.zst | lz4 -c`, as `vino run -- zstd -dc f.zst \| lz4 -c` runs it:
/// two VINO processes joined by a kernel pipe, in one session; what comes out the host's lz4
/// decompresses to the original, and the status is the pipeline's.
#[test]
fn zstd_into_lz4_through_a_pipe_between_vino_processes() {
    let (dev, k) = boot();
    let data = sample();
    let root = k.spawn(Credentials::root());
    put(&root, "/f.zst", &host("zstd", &["-c"], &data));
    k.exit(root.pid());
    let stages = vec![
        vino_wasi::Stage {
            program: program("zstd"),
            setup: vino_wasi::Setup::new(vec![b"zstd".to_vec(), b"-dc".to_vec(), b"/f.zst".to_vec()], Vec::new()),
        },
        vino_wasi::Stage {
            program: program("lz4"),
            setup: vino_wasi::Setup::new(vec![b"lz4".to_vec(), b"-c".to_vec()], Vec::new()),
        },
    ];
    let (stdio, out, err) = common::stdio(Vec::new());
    let holder = k.spawn(Credentials::root());
    let kill = stages[0].program.kill_switch();
    let exits = vino_wasi::run_pipeline(&holder, stages, stdio, &kill).unwrap();
    assert_eq!(exits, [Exit::Code(0), Exit::Code(0)], "{}", err.text());
    assert_eq!(vino_wasi::pipefail_status(&exits), 0);
    assert!(
        host("lz4", &["-dc"], &out.bytes()) == data,
        "the pipeline's output decompresses"
    );
    assert!(holder.children().is_empty() && holder.zombies() == 0);
    k.exit(holder.pid());
    fsck(&dev, &k);
}

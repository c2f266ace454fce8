//! `vino bench vm` at CI size: every Linux row that ran has a positive, finite ns per page in
//! every round and its ratio to the userfaultfd floor; the swap-in either ran or says why not;
//! the VINO side measured its first touch, swap-in and mapped-file faults; SQLite and gzip ran
//! paged and unpaged; no swap file or cgroup is left behind; vm.c's wasm32-wasi build runs
//! `touch`, `reread` and `mapfile` as a VINO process and refuses `uffd` with exit 2. Timings are
//! not checked.

use std::process::Command;

#[test]
fn the_linux_fault_costs_are_measured_and_the_swap_is_undone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_vino-bench-vm"))
        .args(["--quick", "--json", "--out", path, "--scratch", path])
        .output()
        .expect("the program runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    let rounds = v["rounds"].as_u64().unwrap() as usize;
    assert_eq!(rounds, 2, "{v}");
    let vino = v["vino_side"]["rows"].as_array().expect("the VINO side ran");
    for key in ["first-touch", "swap-in", "mapped-cold", "mapped-hot"] {
        let r = vino
            .iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("VINO {key} missing: {v}"));
        assert!(
            r["ns_per_page"].as_f64().is_some_and(|x| x.is_finite() && x > 0.0),
            "{r}"
        );
    }
    let paging = v["paging_cost"]["rows"].as_array().expect("the paging cost ran");
    for program in ["sqlite3", "gzip"] {
        let r = paging
            .iter()
            .find(|r| r["program"] == program)
            .unwrap_or_else(|| panic!("paging cost of {program} missing: {v}"));
        for side in ["paged_s", "unpaged_s"] {
            assert!(
                r[side].as_f64().is_some_and(|x| x.is_finite() && x > 0.0),
                "{side}: {r}"
            );
        }
        if v["paging_cost"]["paged"] == true {
            assert!(
                r["pager_faults"].as_f64().is_some_and(|x| x > 0.0),
                "no fault paged: {r}"
            );
        }
    }
    let linux = &v["linux"];
    let rows = linux["rows"].as_array().expect("rows");
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    let skipped: Vec<&str> = linux["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    for key in ["first-touch", "uffd", "uffd-one-cpu", "mapped-cold", "mapped-hot"] {
        assert!(keys.contains(&key), "{key} missing: {v}");
    }
    assert!(
        keys.contains(&"swap-in") != skipped.contains(&"swap-in"),
        "swap-in neither ran nor was skipped: {v}"
    );
    let floor = rows.iter().find(|r| r["key"] == "uffd").unwrap()["ns_per_page"]
        .as_f64()
        .unwrap();
    for r in rows {
        let ns = r["ns_per_page"].as_f64().unwrap();
        assert!(ns.is_finite() && ns > 0.0, "{r}");
        let each = r["ns_per_page_rounds"].as_array().unwrap();
        assert_eq!(each.len(), rounds, "{r}");
        assert!(
            each.iter()
                .all(|x| x.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)),
            "{r}"
        );
        assert!((r["vs_uffd_floor"].as_f64().unwrap() - ns / floor).abs() < 1e-9, "{r}");
        assert!(r["pages"].as_u64().unwrap() > 0, "{r}");
    }
    if let Some(swap) = rows.iter().find(|r| r["key"] == "swap-in") {
        assert!(
            swap["major_faults"].as_f64().unwrap() > 0.0,
            "no page came back from swap: {swap}"
        );
    }
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    assert!(!swaps.contains(path), "the swap file is still on: {swaps}");
    if let Some(setup) = linux["swap_setup"].as_object() {
        let cgroup = setup["cgroup"].as_str().unwrap();
        assert!(!std::path::Path::new(cgroup).exists(), "{cgroup} is left");
    }
    assert!(dir.path().join("vm.json").exists() && dir.path().join("vm.svg").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "vm.json" && n != "vm.svg")
        .collect();
    assert!(left.is_empty(), "left in the scratch directory: {left:?}");
}

#[test]
fn the_programs_figures_are_read_back() {
    use vino_experiments::vm::parse_figures;
    let f = parse_figures("noise\nns_per_page=123.4 pages=16 minflt=18 majflt=0 resident_before=3\n");
    assert_eq!(f["ns_per_page"], 123.4);
    assert_eq!(f["pages"], 16.0);
    assert_eq!(f["majflt"], 0.0);
    assert_eq!(f["resident_before"], 3.0);
    assert!(parse_figures("pages=16\n").is_empty());
    assert!(!parse_figures("ns_per_page=inf pages=1\n").contains_key("ns_per_page"));
}

/// What a VINO process's standard output or error collects.
#[derive(Clone, Default)]
struct Collected(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Collected {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_wasm_build_touches_rereads_and_maps_as_a_vino_process_and_refuses_uffd() {
    use std::sync::Arc;
    use vino_blockdev::{BlockDevice, MemDevice};
    let dir = tempfile::tempdir().unwrap();
    let wasm = vino_experiments::vm::build_wasm(dir.path()).unwrap();
    let dev = Arc::new(MemDevice::new(1024));
    vino_fs::mkfs(&*dev, &vino_fs::MkfsOptions::default()).unwrap();
    let kernel = vino_kernel::Kernel::boot(dev as Arc<dyn BlockDevice>, &vino_kernel::KernelConfig::default()).unwrap();
    let program = vino_wasi::Program::compile(&wasm, vino_wasi::ProgramLimits::default()).unwrap();
    let run = |args: &[&str]| {
        let (out, err) = (Collected::default(), Collected::default());
        let stdio = vino_wasi::Stdio {
            stdin: Box::new(std::io::empty()),
            stdout: Box::new(out.clone()),
            stderr: Box::new(err.clone()),
            tty: [false; 3],
        };
        let argv = std::iter::once("vm")
            .chain(args.iter().copied())
            .map(|a| a.as_bytes().to_vec())
            .collect();
        let exit = program
            .run(
                &kernel,
                vino_kernel::Credentials::root(),
                vino_wasi::Setup::new(argv, Vec::new()),
                stdio,
                &program.kill_switch(),
            )
            .unwrap();
        let text = |c: &Collected| String::from_utf8_lossy(&c.0.lock().unwrap()).into_owned();
        (exit, text(&out), text(&err))
    };
    let root = kernel.spawn(vino_kernel::Credentials::root());
    let fd = root.open("/f", vino_kernel::OpenFlags::create()).unwrap();
    root.write(fd, &[7u8; 16 * 4096]).unwrap();
    root.close(fd).unwrap();
    kernel.exit(root.pid());
    for args in [&["touch", "64"][..], &["reread", "64", "2"], &["mapfile", "/f", "hot"]] {
        let (exit, out, err) = run(args);
        assert_eq!(exit, vino_wasi::Exit::Code(0), "{args:?}: {err}");
        let f = vino_experiments::vm::parse_figures(&out);
        assert!(f["ns_per_page"] > 0.0, "{args:?}: {out}");
        assert!(!f.contains_key("majflt"), "{args:?}: {out}");
    }
    let (exit, _, err) = run(&["uffd", "64"]);
    assert_eq!(exit, vino_wasi::Exit::Code(2), "uffd: {err}");
    assert!(err.contains("userfaultfd not supported"), "uffd: {err}");
    kernel.shutdown().unwrap();
}

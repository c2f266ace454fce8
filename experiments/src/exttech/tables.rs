//! Rendering of the study's report: tables side by side with the thesis'
//! numbers, and the normalized-time chart.

use std::path::Path;

use anyhow::Result;

use super::{ExtTechReport, Measurement, Variant, Workload};
use vino_measure::Stats;
use vino_measure::report::{self, Table, fmt_count, fmt_ns, fmt_ratio};

impl ExtTechReport {
    fn measurement(&self, w: Workload, v: Variant) -> Option<&Measurement> {
        self.results.iter().find(|m| m.workload == w && m.variant == v)
    }

    /// The report as printable tables.
    pub fn tables(&self) -> Vec<Table> {
        let mut out = Vec::new();
        let variants: Vec<Variant> = Variant::ALL
            .into_iter()
            .filter(|v| self.results.iter().any(|m| m.variant == *v))
            .collect();
        let mut headers = vec!["workload"];
        headers.extend(variants.iter().map(|v| v.label()));

        let mut raw = Table::new("E2: extension technologies, time per operation (median)", &headers);
        let mut norm = Table::new("E2/E3: time normalized to native code", &headers);
        for w in Workload::ALL {
            let mut r1 = vec![w.label().to_string()];
            let mut r2 = vec![w.label().to_string()];
            for v in &variants {
                let m = self.measurement(w, *v);
                r1.push(
                    m.and_then(|m| m.stats)
                        .map(|s| fmt_ns(s.median_ns))
                        .unwrap_or_else(|| "n/a".into()),
                );
                r2.push(
                    m.and_then(|m| m.normalized)
                        .map(fmt_ratio)
                        .unwrap_or_else(|| "n/a".into()),
                );
            }
            raw.row(r1);
            norm.row(r2);
        }
        for w in Workload::ALL {
            raw.note(format!("{}: {}", w.short(), w.unit()));
        }
        for v in &variants {
            raw.note(format!("{}: {}", v.label(), v.description()));
        }
        for m in self.results.iter().filter(|m| m.skipped.is_some()) {
            raw.note(format!(
                "{} / {}: not measured ({})",
                m.workload.short(),
                m.variant.label(),
                m.skipped.as_deref().unwrap_or("")
            ));
        }
        if let Some(a) = self
            .measurement(Workload::Md5, Variant::Native)
            .and_then(|m| m.answer.as_ref())
        {
            norm.note(format!(
                "every technology computed the same answers (MD5 of the 1 MB input: {a})"
            ));
        }
        out.push(raw);
        out.push(norm);

        // Side by side with the thesis.
        let mut seed_techs: Vec<&str> = Vec::new();
        for s in &self.seed {
            if !seed_techs.contains(&s.technology) {
                seed_techs.push(s.technology);
            }
        }
        let mut h2: Vec<String> = vec!["workload".into()];
        h2.extend(seed_techs.iter().map(|t| format!("[1998] {t}")));
        let here: Vec<Variant> = variants.iter().copied().filter(|v| *v != Variant::Native).collect();
        h2.extend(here.iter().map(|v| v.label().to_string()));
        let mut side = Table {
            title: "Normalized to C / native: the thesis' technologies and today's".into(),
            headers: h2,
            ..Table::default()
        };
        for w in [Workload::HotList, Workload::Md5, Workload::LogicalDisk] {
            let mut r = vec![w.short().to_string()];
            for t in &seed_techs {
                r.push(
                    self.seed
                        .iter()
                        .find(|s| s.workload == w && s.technology == *t)
                        .map(|s| fmt_ratio(s.normalized))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            for v in &here {
                r.push(
                    self.measurement(w, *v)
                        .and_then(|m| m.normalized)
                        .map(fmt_ratio)
                        .unwrap_or_else(|| "n/a".into()),
                );
            }
            side.row(r);
        }
        side.note(
            "[1998] columns: thesis tables 2, 4, 6 (Solaris 75 MHz SPARC: Modula-3, Omniware SFI without read \
             protection, interpreted Java), table 7 (Java JIT, Windows 95) and table 8 (MiSFIT with read-write-call \
             protection, 100 MHz Pentium)",
        );
        side.note("the thesis' logical disk ran the whole simulation in one program; compare it with the 1-call row above as well");
        out.push(side);

        // Invocation costs.
        let mut inv = Table::new(
            "Cost of one empty invocation (call or upcall round trip)",
            &["mechanism", "median", "min", "p90", "cycles"],
        );
        for c in &self.invocation {
            match c.stats {
                Some(s) => inv.row([
                    c.name.clone(),
                    fmt_ns(s.median_ns),
                    fmt_ns(s.min_ns),
                    fmt_ns(s.p90_ns),
                    s.median_cycles.map(|c| format!("{c:.0}")).unwrap_or_else(|| "-".into()),
                ]),
                None => inv.row([c.name.clone(), format!("n/a ({})", c.skipped.as_deref().unwrap_or(""))]),
            };
        }
        inv.note("thesis 4.3.3: upcall estimated by signal handling, 19.5-55.9 µs on 1995 machines; 37.2 µs measured upcall on a 486DX2-66");
        out.push(inv);

        // The few-nanosecond calls, taking turns.
        let mut turn = Table::new(
            "Null call and hot list, native code and Wasm taking turns (median per call)",
            &[
                "technology",
                "null call",
                "hot list",
                "hot list vs native",
                "null call vs native",
            ],
        );
        for t in &self.in_turn {
            turn.row([
                t.variant.label().to_string(),
                fmt_ns(t.nop_ns),
                fmt_ns(t.hot_ns),
                fmt_ratio(t.hot_vs_native),
                fmt_ratio(t.nop_vs_native),
            ]);
        }
        if let Some(t) = self.in_turn.first() {
            turn.note(format!(
                "{} rounds; each times a batch of calls on every technology in turn, the order turning every round; \
                 ratios are the median of each round's ratio",
                t.rounds
            ));
        }
        out.push(turn);

        // Load costs.
        let mut load = Table::new(
            "Graft load cost: compile and instantiate (median)",
            &["technology", "module", "bytes", "compile", "instantiate"],
        );
        for l in &self.load {
            load.row([
                l.technology.clone(),
                l.module.clone(),
                l.module_bytes.to_string(),
                fmt_ns(l.compile.median_ns),
                fmt_ns(l.instantiate.median_ns),
            ]);
        }
        load.note("compile = validation + code generation (wasmtime: Cranelift; wasmi: translation to its bytecode); instantiate = new store + instance");
        out.push(load);

        // Device costs.
        let d = &self.device;
        let mut dev = Table::new(
            format!(
                "Device costs ({}, {}, {} MB file)",
                d.path,
                d.filesystem,
                d.file_bytes >> 20
            ),
            &["operation", "median", "min", "p90", "samples"],
        );
        let mut drow = |name: &str, s: &Stats| {
            dev.row([
                name.to_string(),
                fmt_ns(s.median_ns),
                fmt_ns(s.min_ns),
                fmt_ns(s.p90_ns),
                s.rounds.to_string(),
            ]);
        };
        let io = if d.direct_io {
            "O_DIRECT"
        } else {
            "buffered, cache dropped (FALLBACK)"
        };
        drow(&format!("random 4 KB read ({io})"), &d.read_4k_random);
        drow(&format!("1 MB read ({io})"), &d.read_1m);
        drow(&format!("random 4 KB write ({io})"), &d.write_4k_random);
        drow(&format!("64 KB segment write ({io})"), &d.write_64k_segment);
        if let Some(f) = &d.fault_mmap_4k {
            drow("page fault on a mapped file (MADV_RANDOM)", f);
        }
        for n in &d.notes {
            dev.note(n.clone());
        }
        dev.note("thesis table 3: page fault 4.7 ms (Linux, Pentium 90) to 25.1 ms (Alpha, 16 pages); table 5: 1 MB in 235-604 ms");
        out.push(dev);

        // Break-even.
        let b = &self.break_even;
        let mut hl = Table::new(
            "Break-even, page eviction: searches per page fault (thesis table 2)",
            &["technology", "search", "searches per fault", "pays off (> 781)?"],
        );
        for h in &b.hotlist {
            hl.row([
                h.variant.label().to_string(),
                fmt_ns(h.search_ns),
                fmt_count(h.searches_per_fault),
                if h.pays_off { "yes" } else { "no" }.to_string(),
            ]);
        }
        hl.note(format!(
            "page fault = random 4 KB read from the device: {}",
            fmt_ns(b.fault_ns)
        ));
        hl.note("the model application saves one fault every 781 calls (64 hot pages among 50,000)");
        match b.upcall_budget_ns {
            Some(u) if u > 0.0 => {
                hl.note(format!(
                    "largest upcall time at which a hardware-isolated graft breaks even: {} (thesis: 4.3 µs Solaris, 29.2 µs Alpha)",
                    fmt_ns(u)
                ));
            }
            Some(_) => {
                hl.note("no upcall time lets a hardware-isolated graft break even: the native search alone costs more than the fault allows (thesis: 4.3 µs Solaris, 29.2 µs Alpha)");
            }
            None => {}
        }
        hl.note("thesis (Solaris): C 1533, Modula-3 1095, Omniware 1095, interpreted Java 49");
        out.push(hl);

        let mut md = Table::new(
            "Break-even, MD5: fingerprint time / time to read 1 MB (thesis table 4)",
            &["technology", "MD5 of 1 MB", "1 MB read", "MD5 / read", "overlaps I/O?"],
        );
        for m in &b.md5 {
            md.row([
                m.variant.label().to_string(),
                fmt_ns(m.md5_ns),
                fmt_ns(b.read_1m_ns),
                fmt_ratio(m.ratio_to_read),
                if m.overlaps_io { "yes" } else { "no" }.to_string(),
            ]);
        }
        md.note("thesis (Solaris): C 0.46, Modula-3 0.92, Omniware 0.68, interpreted Java 32");
        out.push(md);

        let mut ldt = Table::new(
            "Break-even, logical disk: per-block overhead (thesis table 6)",
            &[
                "technology",
                "per block (1 call/write)",
                "per block (1 call)",
                "/ random 4 KB write",
                "/ saving per block",
            ],
        );
        for l in &b.logdisk {
            ldt.row([
                l.variant.label().to_string(),
                fmt_ns(l.per_block_ns),
                l.per_block_batched_ns.map(fmt_ns).unwrap_or_else(|| "-".into()),
                fmt_ratio(l.fraction_of_random_write),
                fmt_ratio(l.fraction_of_saving),
            ]);
        }
        ldt.note(format!(
            "random 4 KB write {}; batching saves {} per block (random write minus 1/16 of a 64 KB segment write)",
            fmt_ns(b.random_write_ns),
            fmt_ns(b.segment_saving_per_block_ns)
        ));
        ldt.note("the graft pays off while its per-block overhead is below the saving (last column < 1)");
        ldt.note("thesis (Solaris): C 7.2 µs, Modula-3 11.1 µs, Omniware 8.4 µs, interpreted Java 94 µs per block");
        out.push(ldt);

        let m = &self.machine;
        let mut mach = Table::new("Machine", &["item", "value"]);
        mach.row(["cpu".to_string(), m.cpu.clone()]);
        mach.row(["logical cpus".to_string(), m.logical_cpus.to_string()]);
        mach.row(["kernel".to_string(), m.kernel.clone()]);
        mach.row(["virtualized".to_string(), m.virtualized.to_string()]);
        mach.row([
            "tsc".to_string(),
            m.tsc_ghz.map(|g| format!("{g:.2} GHz")).unwrap_or_else(|| "-".into()),
        ]);
        mach.row(["clang".to_string(), m.clang.clone()]);
        mach.row(["wasm runtimes".to_string(), format!("{}, {}", m.wasmtime, m.wasmi)]);
        mach.row(["upcall cpus".to_string(), m.upcall_cpus.clone()]);
        mach.row([
            "load average".to_string(),
            format!("{:.2} -> {:.2}", m.load_average.0, m.load_average.1),
        ]);
        mach.row([
            "mode".to_string(),
            format!(
                "{} ({:.1} s)",
                if self.quick { "quick" } else { "full" },
                self.elapsed_s
            ),
        ]);
        for n in &self.notes {
            mach.note(n.clone());
        }
        out.push(mach);
        out
    }

    /// Grouped bar chart of normalized time per workload and technology
    /// (logarithmic when the spread is large).
    pub fn plot(&self, path: &Path) -> Result<()> {
        let groups: Vec<(String, Vec<(String, f64)>)> = Workload::ALL
            .iter()
            .map(|&w| {
                let bars = Variant::ALL
                    .iter()
                    .filter_map(|&v| Some((v.label().to_string(), self.measurement(w, v)?.normalized?)))
                    .collect();
                (w.short().to_string(), bars)
            })
            .collect();
        report::bar_chart(
            path,
            "Extension technologies: time normalized to native code",
            "time / native",
            &groups,
        )
    }
}

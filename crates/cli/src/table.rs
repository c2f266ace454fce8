//! The demo's text tables: aligned columns under a title, notes below; the same layout as the
//! experiments' tables (`vino-measure`), which `vino` does not link.

/// A table of already-formatted cells.
pub struct Table {
    title: String,
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Appends a row; missing cells are shown empty.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// A line printed under the table.
    pub fn note(&mut self, note: impl Into<String>) -> &mut Self {
        self.notes.push(note.into());
        self
    }

    /// The table as text: the first column left-aligned, the others right-aligned.
    pub fn render(&self) -> String {
        let ncols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.headers.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; ncols];
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let cells = widths.iter().enumerate().map(|(i, &w)| {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                if i == 0 { format!("{c:<w$}") } else { format!("{c:>w$}") }
            });
            cells.collect::<Vec<_>>().join("  ").trim_end().to_string() + "\n"
        };
        let total = widths.iter().sum::<usize>() + 2 * ncols.saturating_sub(1);
        let mut out = format!(
            "{}\n{}\n",
            self.title,
            "=".repeat(self.title.chars().count().max(total))
        );
        if !self.headers.is_empty() {
            out += &line(&self.headers);
            out += &format!("{}\n", "-".repeat(total));
        }
        for r in &self.rows {
            out += &line(r);
        }
        for n in &self.notes {
            out += &format!("  * {n}\n");
        }
        out
    }

    /// Prints the table and a blank line.
    pub fn print(&self) {
        println!("{}", self.render());
    }
}

/// A duration in nanoseconds with a readable unit (ns, µs, ms, s) and about three significant
/// digits.
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".into();
    }
    if ns == 0.0 {
        return "0 ns".into();
    }
    let (v, unit) = match ns.abs() {
        a if a < 1e3 => (ns, "ns"),
        a if a < 1e6 => (ns / 1e3, "µs"),
        a if a < 1e9 => (ns / 1e6, "ms"),
        _ => (ns / 1e9, "s"),
    };
    let digits = match v.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        a if a >= 1.0 => 2,
        _ => 3,
    };
    format!("{v:.digits$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_as_the_experiments_do() {
        let mut t = Table::new("T", &["name", "value"]);
        t.row(["a", "1"]).row(["longer", "12345"]).note("n");
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines,
            [
                "T",
                "=============",
                "name    value",
                "-------------",
                "a           1",
                "longer  12345",
                "  * n"
            ]
        );
    }

    #[test]
    fn durations() {
        assert_eq!(fmt_ns(12.345), "12.3 ns");
        assert_eq!(fmt_ns(1234.0), "1.23 µs");
        assert_eq!(fmt_ns(2.5e6), "2.50 ms");
        assert_eq!(fmt_ns(0.5), "0.500 ns");
        assert_eq!(fmt_ns(0.0), "0 ns");
    }
}

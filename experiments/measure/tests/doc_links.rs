//! Every relative link in README.md and docs/ leads to a file that exists, and a link to a
//! heading (`page.md#heading`) to a heading that exists: pages move, and their links must follow.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every Markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out
}

/// The text outside fenced code blocks, where a `](` is not a link.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The targets of the page's Markdown links.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target.to_string()))
        .collect()
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as dashes.
fn anchor(heading: &str) -> String {
    let kept = heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .collect::<String>();
    kept.replace(' ', "-")
}

fn anchors(page: &Path) -> Vec<String> {
    let text = fs::read_to_string(page).unwrap();
    prose(&text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn relative_links_lead_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = prose(&fs::read_to_string(&page).unwrap());
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") || link.contains(' ') {
                continue;
            }
            let (file, heading) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let ok = target.exists()
                && (heading.is_empty()
                    || target.extension().is_none_or(|e| e != "md")
                    || anchors(&target).iter().any(|a| a == heading));
            if !ok {
                broken.push(format!(
                    "{}: {link}",
                    page.strip_prefix(root()).unwrap_or(&page).display()
                ));
            }
        }
    }
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
}

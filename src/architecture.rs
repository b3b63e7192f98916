//! Rules about the source tree, read from its text and run with the unit tests: no import cycle
//! between files nor between top-level modules (folders as one), AWS calls and the environment
//! each in their own modules, and the README naming every module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

fn module_of(rel: &Path) -> String {
    let parts: Vec<String> = rel.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).filter(|p| *p != "mod").collect();
    if parts == ["main"] { String::new() } else { parts.join("::") }
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((module_of(p.strip_prefix(root).unwrap()), text));
        }
    }
}

/// The code of a file without its comments and its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let cut = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
    text[..cut].lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn idents_after<'a>(text: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let path: Vec<&str> = rest
            .split("::")
            .map(|seg| seg.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap_or(""))
            .take_while(|s| !s.is_empty())
            .collect();
        out.push(path);
    }
    out
}

/// The longest known module that `base` + `path` starts with.
fn resolve(modules: &BTreeSet<String>, base: &[&str], path: &[&str]) -> Option<String> {
    let full: Vec<&str> = base.iter().chain(path.iter()).copied().collect();
    (0..=full.len()).rev().map(|n| full[..n].join("::")).find(|m| modules.contains(m))
}

pub fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    sources(src, src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut g = Graph::new();
    for (m, text) in &files {
        let text = code(text);
        let me: Vec<&str> = if m.is_empty() { vec![] } else { m.split("::").collect() };
        let mut deps = BTreeSet::new();
        for p in idents_after(&text, "crate::") {
            deps.extend(resolve(&modules, &[], &p));
        }
        if !me.is_empty() {
            let parent = &me[..me.len() - 1];
            for p in idents_after(&text, "super::") {
                deps.extend(resolve(&modules, parent, &p));
            }
        }
        // A parent naming its own child module (`queue::read`, `pub use ctx::Ctx`).
        for child in modules.iter().filter(|c| c.rsplit_once("::").map(|(p, _)| p).unwrap_or("") == m.as_str() && *c != m) {
            let name = child.rsplit("::").next().unwrap();
            let used = idents_after(&text, &format!("{name}::")).iter().any(|_| true);
            if used {
                deps.insert(child.clone());
            }
        }
        deps.remove(m);
        deps.remove("");
        g.insert(m.clone(), deps);
    }
    g
}

/// One cycle of the graph, as the modules along it, if there is one.
pub fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(g: &Graph, n: &str, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            match state.get(d.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == d).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(d.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(g, d, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0
            && let Some(c) = visit(g, n, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

/// The graph between top-level modules (`checks`, `facts`, `report`, `engine` ...): a folder's
/// files count as one module, an import inside a folder is no edge.
pub fn top_level(g: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or("").to_string();
    let mut out = Graph::new();
    for (m, deps) in g {
        let entry = out.entry(top(m)).or_default();
        entry.extend(deps.iter().map(|d| top(d)).filter(|d| *d != top(m)));
    }
    out
}

/// Each top-level module's floor: 0 for one that imports no other, else one above the highest
/// floor it imports. With no cycle every import runs down by construction.
pub fn floors(g: &Graph) -> BTreeMap<String, usize> {
    fn floor(g: &Graph, m: &str, memo: &mut BTreeMap<String, usize>) -> usize {
        if let Some(f) = memo.get(m) {
            return *f;
        }
        let f = g.get(m).into_iter().flatten().map(|d| floor(g, d, memo) + 1).max().unwrap_or(0);
        memo.insert(m.to_string(), f);
        f
    }
    let mut memo = BTreeMap::new();
    for m in g.keys() {
        floor(g, m, &mut memo);
    }
    memo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
        assert!(g.contains_key("resources::queue") && g["resources::queue"].contains("ctx"), "graph read: {g:?}");
        assert!(g["resources"].contains("resources::queue"), "a parent's use of its child is an edge");
        if let Some(c) = find_cycle(&g) {
            panic!("import cycle: {}", c.join(" -> "));
        }
    }

    /// Facts at the bottom, commands on top (docs/how-it-works.md, "Layout"): between top-level
    /// modules, folders included, every import runs down: no two import each other, directly
    /// or around a circle. The floors pinned here are the layout's promises.
    #[test]
    fn imports_between_top_level_modules_run_down() {
        let g = top_level(&graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")));
        assert!(g["checks"].contains("facts") && !g["checks"].contains("checks"), "folders read as one: {g:?}");
        if let Some(c) = find_cycle(&g) {
            panic!("imports between top-level modules run back up: {}", c.join(" -> "));
        }
        let f = floors(&g);
        // The vocabulary sits below every judge, reader of facts and command; the facts below the
        // readers that fill them in (a reader's answer is a fact's type, never the other way).
        for (low, high) in [
            ("facts", "aws"),
            ("facts", "checks"),
            ("policy", "checks"),
            ("checks", "resources"),
            ("checks", "gather"),
            ("ctx", "resources"),
            ("gather", "doctor"),
            ("report", "engine"),
            ("gather", "import"),
        ] {
            assert!(f[low] < f[high], "{low} (floor {}) must sit below {high} (floor {})", f[low], f[high]);
        }
        for bottom in ["facts", "policy"] {
            let above: Vec<&String> = g[bottom]
                .iter()
                .filter(|d| ["aws", "checks", "gather", "resources", "report", "doctor", "import"].contains(&d.as_str()))
                .collect();
            assert!(above.is_empty(), "{bottom} imports a reader, a judge or a command: {above:?}");
        }
    }

    #[test]
    fn a_cycle_through_folders_is_found_and_floors_run_down() {
        let mut g = Graph::new();
        g.insert("checks::catalog".into(), ["doctor::model".to_string(), "checks::finding".to_string()].into());
        g.insert("doctor".into(), ["checks::catalog".to_string()].into());
        g.insert("doctor::model".into(), BTreeSet::new());
        let top = top_level(&g);
        assert_eq!(top["checks"], ["doctor".to_string()].into(), "an import inside a folder is no edge");
        assert_eq!(find_cycle(&top).unwrap(), ["checks", "doctor", "checks"], "file-level it is no cycle, folder-level it is");
        assert!(find_cycle(&g).is_none());
        let mut ok = Graph::new();
        ok.insert("engine".into(), ["checks".to_string(), "facts".to_string()].into());
        ok.insert("checks".into(), ["facts".to_string()].into());
        let f = floors(&ok);
        assert_eq!((f["facts"], f["checks"], f["engine"]), (0, 1, 2));
    }

    /// AWS calls are made only by the readers (`aws::read`) and the kinds' writes (`resources`).
    #[test]
    fn only_the_readers_and_the_kinds_call_aws() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &src, &mut files);
        // Spelled in two parts so that this file does not match the grep the issue gives.
        let send = [".se", "nd()"].concat();
        let callers: Vec<&String> = files
            .iter()
            .filter(|(m, text)| {
                !(m == "aws" || m.starts_with("aws::") || m.starts_with("resources")) && code(text).contains(&send)
            })
            .map(|(m, _)| m)
            .collect();
        assert!(callers.is_empty(), "AWS calls outside aws::read and resources: {callers:?}");
    }

    #[test]
    fn only_the_settings_module_reads_the_environment_or_asks_for_a_terminal() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&root, &root, &mut files);
        let needles = ["env::var", "env::vars", "is_terminal()"];
        let readers: Vec<String> = files
            .iter()
            .filter(|(m, _)| m != "settings" && m != "architecture")
            .filter(|(_, text)| needles.iter().any(|n| text.contains(n)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(readers.is_empty(), "read the environment through `Settings` instead: {readers:?}");
        assert!(files.iter().any(|(m, t)| m == "settings" && t.contains("env::vars_os")), "the check reads the files");
    }

    /// The backticked `src/` paths in the README's "Source map" table: a file, a directory
    /// (ending in `/`, covering the files directly in it) or a pattern (`src/resources/<kind>.rs`).
    fn source_map(readme: &str) -> Vec<String> {
        let section = readme.split("\n## Source map").nth(1).expect("README has a Source map section");
        let table = section.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
        let mut paths = Vec::new();
        for line in table {
            let cell = line.split('|').nth(1).unwrap_or("");
            paths.extend(cell.split('`').skip(1).step_by(2).filter(|p| p.starts_with("src/")).map(String::from));
        }
        paths
    }

    fn named(file: &str, paths: &[String]) -> bool {
        let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
        paths.iter().any(|p| {
            p == file || p.strip_suffix('/') == Some(dir) || (p.contains('<') && p.rsplit_once('/').map(|(d, _)| d) == Some(dir))
        })
    }

    #[test]
    fn the_readme_source_map_names_every_module() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let paths = source_map(&std::fs::read_to_string(root.join("README.md")).unwrap());
        let mut files = Vec::new();
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, root, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        walk(&root.join("src"), root, &mut files);
        let missing: Vec<&String> = files.iter().filter(|f| !named(f, &paths)).collect();
        assert!(missing.is_empty(), "name these in README.md's Source map (a row may cover a directory): {missing:?}");
        let stale: Vec<&String> = paths.iter().filter(|p| !p.contains('<') && !root.join(p).exists()).collect();
        assert!(stale.is_empty(), "the Source map names paths that do not exist: {stale:?}");
    }

    #[test]
    fn the_source_map_check_reads_rows_directories_and_patterns() {
        let readme = "x\n## Source map\n\ntext\n\n| file | what |\n|---|---|\n| `src/a.rs`, `src/b/` | `c.rs` |\n| `src/k/<kind>.rs` | x |\n\n## Next\n| `src/z.rs` | no |\n";
        let paths = source_map(readme);
        assert_eq!(paths, ["src/a.rs", "src/b/", "src/k/<kind>.rs"]);
        assert!(named("src/a.rs", &paths) && named("src/b/c.rs", &paths) && named("src/k/queue.rs", &paths));
        assert!(!named("src/c.rs", &paths) && !named("src/b/d/e.rs", &paths) && !named("src/z.rs", &paths));
    }

    #[test]
    fn the_check_finds_a_cycle() {
        let mut g = Graph::new();
        g.insert("a".into(), ["b".to_string()].into());
        g.insert("b".into(), ["c".to_string()].into());
        g.insert("c".into(), ["a".to_string()].into());
        assert_eq!(find_cycle(&g).unwrap(), ["a", "b", "c", "a"]);
        g.get_mut("c").unwrap().clear();
        assert!(find_cycle(&g).is_none());
    }
}

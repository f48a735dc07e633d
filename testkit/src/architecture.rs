//! ARCHITECTURE.md kept true, for each crate of the workspace: its code map's "may use"
//! column is checked against what each file of the crate's `src/` imports, and no two files
//! import each other (directly or round a circle). Each crate's `architecture` test calls
//! [`check`] with its own directory and code map.
//!
//! Imports are read as text: every `use` tree and every `crate::`/`super::`/`self::` path
//! in code, each resolved to the module file it names. Unit tests (below a file's
//! `#[cfg(test)]`) and comments are left out; a module re-exporting its own children
//! (`pub use child::Item`) does not depend on them for that.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path: `["config", "rule"]` for `src/config/rule.rs`, `[]` for `src/lib.rs`.
pub type ModulePath = Vec<String>;

/// One source file of a crate.
pub struct SourceFile {
    /// Its path, relative to the crate's directory.
    pub path: PathBuf,
    /// The module it is.
    pub module: ModulePath,
    /// Its code above the unit tests, without comments.
    pub code: String,
}

fn source_files(root: &Path) -> Vec<SourceFile> {
    let src = root.join("src");
    let mut files = Vec::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(&src).unwrap().with_extension("");
                let mut module: ModulePath = relative
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect();
                if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                    module.pop();
                }
                if module.len() == 1 && module[0] == "main" {
                    // A binary's `main.rs` is a crate root of its own.
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                files.push(SourceFile {
                    code: code_of(&text),
                    path: path.strip_prefix(root).unwrap().to_owned(),
                    module,
                });
            }
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// The text above the unit tests, without comments.
fn code_of(text: &str) -> String {
    text.lines()
        .take_while(|line| line.trim_start() != "#[cfg(test)]" || line.starts_with(' '))
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `use` tree names: `a::{b, c::{d as e}}` gives `a::b` and `a::c::d`.
pub fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        let path = path.strip_suffix("::self").unwrap_or(path);
        return vec![path.trim_end_matches("::*").to_owned()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|part| !part.trim().is_empty())
        .flat_map(expand_use)
        .map(|tail| match tail.as_str() {
            "self" => prefix.to_owned(),
            _ if prefix.is_empty() => tail,
            _ => format!("{prefix}::{tail}"),
        })
        .collect()
}

/// The paths `file` refers to, each with whether it is a re-export (`pub use`).
pub fn references(file: &SourceFile) -> Vec<(String, bool)> {
    let mut found = Vec::new();
    let code = &file.code;
    // `use` statements (rustfmt starts each on its own line), possibly spread over lines.
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let visibility = trimmed.split("use ").next().unwrap_or("").trim();
        let is_use = trimmed.contains("use ")
            && (visibility.is_empty() || visibility.starts_with("pub"))
            && !visibility.contains(' ');
        if is_use {
            let at = offset + (line.len() - trimmed.len()) + trimmed.find("use ").unwrap_or(0);
            let statement = &code[at + 4..];
            if let Some(end) = statement.find(';') {
                for path in expand_use(&statement[..end]) {
                    found.push((path, visibility.starts_with("pub")));
                }
            }
        }
        offset += line.len();
    }
    // Paths written out in code.
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // `pub(in crate::store::redis)` says who may see an item, not what it uses.
            if code[..at].ends_with("pub(in ") {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            found.push((path.trim_end_matches(':').to_owned(), false));
        }
    }
    found
}

/// A crate's source files and the modules they are.
pub struct Crate {
    /// Every file, sorted by path.
    pub files: Vec<SourceFile>,
    /// Each module's file, by index.
    pub modules: BTreeMap<ModulePath, usize>,
    /// Items `lib.rs` re-exports, and the module each comes from.
    root_items: BTreeMap<String, ModulePath>,
}

impl Crate {
    /// The crate in `root` (the directory holding its `Cargo.toml`).
    pub fn read(root: &Path) -> Crate {
        let files = source_files(root);
        let modules = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let mut krate = Crate {
            files,
            modules,
            root_items: BTreeMap::new(),
        };
        let lib = krate.modules[&Vec::new()];
        for (path, public) in references(&krate.files[lib]) {
            let segments: Vec<&str> = path.split("::").collect();
            if let (true, [module @ .., item]) = (public, segments.as_slice()) {
                let module = module.iter().map(|s| (*s).to_owned()).collect();
                krate.root_items.insert((*item).to_owned(), module);
            }
        }
        krate
    }

    /// The module a path written in `from` names (the longest prefix that is a module), or
    /// `None` for another crate's.
    pub fn resolve(&self, from: &ModulePath, path: &str) -> Option<ModulePath> {
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let (mut base, rest): (ModulePath, &[&str]) = match segments.as_slice() {
            ["crate", rest @ ..] => (Vec::new(), rest),
            ["super", ..] => {
                // `super::super::…` climbs once per `super`.
                let climbs = segments.iter().take_while(|s| **s == "super").count();
                (
                    from[..from.len().saturating_sub(climbs)].to_vec(),
                    &segments[climbs..],
                )
            }
            ["self", rest @ ..] => (from.clone(), rest),
            [first, ..] if self.modules.contains_key(&child(from, first)) => {
                (from.clone(), &segments[..])
            }
            _ => return None,
        };
        let mut rest = rest.iter();
        let mut found = base.clone();
        for segment in rest.by_ref() {
            base.push((*segment).to_owned());
            if self.modules.contains_key(&base) {
                found = base.clone();
            } else {
                break;
            }
        }
        if found.is_empty()
            && let Some(item) = segments.iter().find(|s| !matches!(**s, "crate" | "self"))
            && let Some(module) = self.root_items.get(*item)
        {
            return Some(module.clone());
        }
        Some(found)
    }

    /// Which files each file imports from.
    pub fn edges(&self) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut edges = BTreeMap::new();
        for (index, file) in self.files.iter().enumerate() {
            let targets: &mut BTreeSet<usize> = edges.entry(index).or_default();
            for (path, public) in references(file) {
                let Some(module) = self.resolve(&file.module, &path) else {
                    continue;
                };
                let descendant =
                    module.len() > file.module.len() && module.starts_with(&file.module);
                if public && descendant {
                    continue; // a parent re-exporting its child
                }
                if let Some(&target) = self.modules.get(&module)
                    && target != index
                {
                    targets.insert(target);
                }
            }
        }
        edges
    }
}

fn child(module: &ModulePath, name: &str) -> ModulePath {
    let mut path = module.clone();
    path.push(name.to_owned());
    path
}

/// The room a module is in: its top-level module (`lib.rs` for the crate root).
pub fn room(module: &ModulePath) -> &str {
    module.first().map_or("lib.rs", String::as_str)
}

/// Files that import each other, directly or round a circle (Tarjan's SCCs).
pub fn circles(edges: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct Walk<'e> {
        edges: &'e BTreeMap<usize, BTreeSet<usize>>,
        index: BTreeMap<usize, usize>,
        low: BTreeMap<usize, usize>,
        stack: Vec<usize>,
        found: Vec<Vec<usize>>,
    }
    fn visit(walk: &mut Walk<'_>, node: usize) {
        let order = walk.index.len();
        walk.index.insert(node, order);
        walk.low.insert(node, order);
        walk.stack.push(node);
        for &next in walk.edges.get(&node).into_iter().flatten() {
            if !walk.index.contains_key(&next) {
                visit(walk, next);
                let low = walk.low[&node].min(walk.low[&next]);
                walk.low.insert(node, low);
            } else if walk.stack.contains(&next) {
                let low = walk.low[&node].min(walk.index[&next]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[&node] == walk.index[&node] {
            let at = walk.stack.iter().position(|&n| n == node).unwrap();
            let component = walk.stack.split_off(at);
            if component.len() > 1 {
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &node in edges.keys() {
        if !walk.index.contains_key(&node) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

/// The code map under the heading `section` of `ARCHITECTURE.md` (in `repository`): each
/// room (`` `config/` `` or `` `clock.rs` ``) and the rooms it may use.
pub fn code_map(repository: &Path, section: &str) -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(repository.join("ARCHITECTURE.md")).unwrap();
    let start = text
        .find(section)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no section {section:?}"));
    let rest = &text[start + section.len()..];
    let text = &rest[..rest.find("\n#").unwrap_or(rest.len())];
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(|name| {
                name.trim_end_matches('/')
                    .trim_end_matches(".rs")
                    .to_owned()
            })
            .collect()
    };
    text.lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
            let room = ticked(cells[0]).remove(0);
            let may_use = ticked(cells[cells.len() - 1]).into_iter().collect();
            (room, may_use)
        })
        .collect()
}

/// Checks the crate in `root` against the code map under `section` of the repository's
/// ARCHITECTURE.md: no import circles, every room named in the map and only those, and every
/// import allowed by its room's "may use" column.
pub fn check(repository: &Path, root: &Path, section: &str) {
    let krate = Crate::read(root);
    let found = circles(&krate.edges());
    let described: Vec<Vec<&Path>> = found
        .iter()
        .map(|c| c.iter().map(|&i| krate.files[i].path.as_path()).collect())
        .collect();
    assert!(described.is_empty(), "import circles: {described:#?}");

    let map = code_map(repository, section);
    let rooms: BTreeSet<&str> = krate
        .files
        .iter()
        .map(|f| room(&f.module))
        .filter(|r| *r != "lib.rs")
        .collect();
    let documented: BTreeSet<&str> = map.keys().map(String::as_str).collect();
    assert_eq!(
        rooms,
        documented,
        "ARCHITECTURE.md's code map ({section}) must name every module under {}/src, and only those",
        root.display()
    );
    let mut violations = Vec::new();
    for (from, targets) in krate.edges() {
        let from_room = room(&krate.files[from].module);
        let Some(allowed) = map.get(from_room) else {
            continue;
        };
        for target in targets {
            let to_room = room(&krate.files[target].module);
            if to_room != from_room && to_room != "lib.rs" && !allowed.contains(to_room) {
                violations.push(format!(
                    "{} uses {to_room} ({})",
                    krate.files[from].path.display(),
                    krate.files[target].path.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "not in ARCHITECTURE.md's \"may use\" column:\n{}",
        violations.join("\n")
    );
}

/// The longest a source file may be above its unit tests (ARCHITECTURE.md's promise).
pub const MOST_LINES: usize = 600;

/// Every source file under `root`'s `src/` (Rust, and the Lua scripts the Redis store
/// sends) longer than [`MOST_LINES`] above its unit tests, with its length there.
pub fn oversized(root: &Path) -> Vec<(PathBuf, usize)> {
    let mut found = Vec::new();
    let mut pending = vec![root.join("src")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if !path.extension().is_some_and(|e| e == "rs" || e == "lua") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lines = text
                .lines()
                .take_while(|line| line.trim_start() != "#[cfg(test)]" || line.starts_with(' '))
                .count();
            if lines > MOST_LINES {
                found.push((path.strip_prefix(root).unwrap().to_owned(), lines));
            }
        }
    }
    found.sort();
    found
}

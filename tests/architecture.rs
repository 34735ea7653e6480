//! The shape of the source tree, checked (ARCHITECTURE.md): no import circles among the files
//! of `src/`, sans-IO machines that touch no clock or runtime, and an agent machine's room
//! (`src/agent/machine/`) that imports nothing from its driver's (`src/agent/driver/`).
//!
//! The module graph is read from the source: every `use` declaration and every `crate::…` /
//! `super::…` path in code (comments, strings and `#[cfg(test)] mod` blocks left out), each
//! resolved to the file that defines the item, through `pub use` re-exports. A file that
//! names an item of another file depends on it; a circle is a set of files that depend on
//! each other, directly or through others. Re-exports themselves (`pub use`, `pub(crate)
//! use`) are a module's table of contents, not a dependency of its code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// One source file: its module path and its code without comments, strings and test modules.
struct SourceFile {
    path: String,
    module: Vec<String>,
    code: String,
}

/// The `.rs` files under `dir`, sorted (`deep`: in its subdirectories too).
fn rust_files(dir: &Path, deep: bool) -> Vec<PathBuf> {
    fn walk(dir: &Path, deep: bool, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                if deep {
                    walk(&path, deep, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, deep, &mut out);
    out.sort();
    out
}

/// The core's source files (`src/`).
fn source_files() -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    source_files_of(&root.join("src"), "src", true)
}

/// The source files of the crate whose module root is `root` (`deep`: modules in
/// subdirectories too), labelled `{label}/{path under root}`.
fn source_files_of(root: &Path, label: &str, deep: bool) -> Vec<SourceFile> {
    rust_files(root, deep)
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(root).expect("under the root");
            let mut module: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            let text = fs::read_to_string(&path).expect("a readable source file");
            SourceFile {
                path: format!("{label}/{}", relative.display()),
                module,
                code: without_tests(&strip(&text)),
            }
        })
        .collect()
}

/// The workspace's members other than the core, from the root `Cargo.toml`.
fn other_members() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let start = manifest.find("members").expect("a workspace with members");
    let list = &manifest[start..];
    let list = &list[list.find('[').expect("members = [")..list.find(']').expect("]")];
    list.split(',')
        .map(|m| {
            m.trim()
                .trim_matches(|c| c == '"' || c == '[')
                .trim()
                .to_owned()
        })
        .filter(|m| !m.is_empty() && m != ".")
        .collect()
}

/// A member's source files: its `src/`, or, for a member whose library sits at its top
/// (`benches/lib.rs`), the `.rs` files there.
fn member_source_files(member: &str) -> Vec<SourceFile> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(member);
    if dir.join("src").is_dir() {
        source_files_of(&dir.join("src"), &format!("{member}/src"), true)
    } else {
        source_files_of(&dir, member, false)
    }
}

/// The code without comments, and string and char literals emptied.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'#' | b'"'))
                && !b[..i]
                    .last()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                while i < b.len() && !b[i..].starts_with(&close) {
                    i += 1;
                }
                i += close.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n', '"'); a lifetime ('a) is left as it is.
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The code without `#[cfg(test)] mod … { … }` blocks.
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        if !after.starts_with("mod ") {
            out.push_str("#[cfg(test)]");
            rest = &rest[at + "#[cfg(test)]".len()..];
            continue;
        }
        let Some(open) = after.find('{') else {
            rest = after;
            continue;
        };
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The paths a `use` tree names, each as its segments (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn expand_use(tree_text: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    // `e as f` names `e`: the rename goes before the spaces do (`easf` would hide it).
    let mut tree = String::new();
    let mut tokens = tree_text.split_whitespace();
    while let Some(token) = tokens.next() {
        if token == "as" {
            let renamed = tokens.next().unwrap_or_default();
            tree.push_str(renamed.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'));
        } else {
            tree.push_str(token);
        }
    }
    let mut out = Vec::new();
    match tree.find('{') {
        None => {
            let segments: Vec<String> = tree
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if !segments.is_empty() {
                out.push(segments);
            }
        }
        Some(open) => {
            let prefix = tree[..open].trim_end_matches("::");
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            for part in split_top(inner) {
                if part.is_empty() {
                    continue;
                }
                let joined = if part == "self" {
                    prefix.to_owned()
                } else if prefix.is_empty() {
                    part.to_owned()
                } else {
                    format!("{prefix}::{part}")
                };
                out.extend(expand_use(&joined));
            }
        }
    }
    out
}

/// Every path a file's code names: its `use` declarations, and `crate::` / `super::` /
/// `self::` paths in code.
/// A module path, as its segments.
type ModPath = Vec<String>;

/// The spans of the inline modules (`mod name { … }`) in a file's code.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("mod ") {
        let at = from + at;
        from = at + 4;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let rest = &code[at + 4..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let after = rest[name_len..].trim_start();
        if name_len == 0 || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0usize;
        for (i, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push(at..open + i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// `path` as seen from the file's own module, when it is written `depth` inline modules
/// deep: the first `depth` of its `super`s climb out of those modules (the file itself), and
/// a path that ends inside them names the file itself (`self`).
fn from_file_module(mut path: ModPath, depth: usize) -> ModPath {
    if depth == 0 {
        return path;
    }
    let supers = path.iter().take_while(|s| *s == "super").count();
    if supers == 0 {
        return path;
    }
    let climbed = supers.min(depth);
    path.drain(..climbed);
    if supers <= depth {
        path.insert(0, "self".to_owned());
    }
    path
}

fn named_paths(code: &str) -> (Vec<ModPath>, Vec<(ModPath, bool)>) {
    let inline = inline_modules(code);
    let depth_at = |at: usize| inline.iter().filter(|m| m.contains(&at)).count();
    let mut uses = Vec::new();
    // `use` declarations (with `pub`/`pub(crate)`/`pub(super)` when re-exported).
    let mut exports = Vec::new();
    let bytes = code.as_bytes();
    // Where the `use` declarations are: their paths are read above, not as paths in code.
    let mut declarations = Vec::new();
    let mut i = 0;
    while let Some(at) = code[i..].find("use ") {
        let at = i + at;
        let boundary = at == 0
            || matches!(
                bytes[at - 1],
                b'\n' | b' ' | b'\t' | b';' | b'{' | b'}' | b')'
            );
        if !boundary {
            i = at + 4;
            continue;
        }
        let before = code[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let tree = &code[at + 4..at + end];
        declarations.push(at..at + end);
        for path in expand_use(tree) {
            let path = from_file_module(path, depth_at(at));
            // A re-export states a module's surface (a table of contents); it is followed
            // to resolve paths through it, and is not a dependency of the code.
            if !public {
                uses.push(path.clone());
            }
            exports.push((path, public));
        }
        i = at + end;
    }
    for anchor in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(anchor) {
            let at = from + at;
            from = at + anchor.len();
            // Not the middle of a longer path (the second `super` of `super::super::`).
            if at > 0
                && (bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':')
            {
                continue;
            }
            if declarations
                .iter()
                .any(|d: &std::ops::Range<usize>| d.contains(&at))
            {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segments: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            uses.push(from_file_module(segments, depth_at(at)));
        }
    }
    (uses, exports)
}

struct Graph {
    files: Vec<SourceFile>,
    by_module: BTreeMap<Vec<String>, usize>,
    /// Each file's `use` declarations: (path, whether re-exported).
    exports: Vec<Vec<(Vec<String>, bool)>>,
}

impl Graph {
    fn new() -> Graph {
        Graph::of(source_files())
    }

    fn of(files: Vec<SourceFile>) -> Graph {
        let by_module = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let exports = files.iter().map(|f| named_paths(&f.code).1).collect();
        Graph {
            files,
            by_module,
            exports,
        }
    }

    /// Whether file `f` defines an item named `name` itself.
    fn defines(&self, f: usize, name: &str) -> bool {
        let code = &self.files[f].code;
        [
            "struct ", "enum ", "fn ", "trait ", "type ", "const ", "static ", "mod ", "union ",
        ]
        .iter()
        .any(|kw| {
            let needle = format!("{kw}{name}");
            code.match_indices(&needle).any(|(at, _)| {
                let next = code[at + needle.len()..].chars().next();
                !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !code[..at]
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        })
    }

    /// The file that defines what `path` names, seen from file `from`; `None` for another
    /// crate's item.
    fn resolve(&self, from: usize, path: &[String], depth: usize) -> Option<usize> {
        if depth > 8 || path.is_empty() {
            return None;
        }
        let here = &self.files[from].module;
        let (mut module, rest) = match path[0].as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (here.clone(), &path[1..]),
            "super" => {
                let mut module = here.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    module.pop();
                    rest = &rest[1..];
                }
                (module, rest)
            }
            first => {
                // A child module named without `self::` (2018 paths), else another crate.
                let mut child = here.clone();
                child.push(first.to_owned());
                if !self.by_module.contains_key(&child) {
                    return None;
                }
                (here.clone(), path)
            }
        };
        let mut rest = rest;
        while let Some(next) = rest.first() {
            let mut child = module.clone();
            child.push(next.clone());
            if self.by_module.contains_key(&child) {
                module = child;
                rest = &rest[1..];
            } else {
                break;
            }
        }
        let file = *self.by_module.get(&module)?;
        let Some(name) = rest.first() else {
            return Some(file);
        };
        if name == "*" || self.defines(file, name) {
            return Some(file);
        }
        // A re-export: follow it to the file that defines the item.
        for (export, _) in &self.exports[file] {
            if export.last() == Some(name) {
                if let Some(target) = self.resolve(file, export, depth + 1) {
                    return Some(target);
                }
            }
        }
        Some(file)
    }

    /// Each file's dependencies (other files).
    fn edges(&self) -> Vec<BTreeSet<usize>> {
        (0..self.files.len())
            .map(|f| {
                named_paths(&self.files[f].code)
                    .0
                    .iter()
                    .filter_map(|path| self.resolve(f, path, 0))
                    .filter(|&t| t != f)
                    .collect()
            })
            .collect()
    }
}

/// The strongly connected components with more than one file (Tarjan).
fn circles(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(i) if self.on_stack[w] => self.low[v] = self.low[v].min(i),
                    _ => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let n = edges.len();
    let mut t = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn no_import_circles_among_the_files_of_src() {
    let graph = Graph::new();
    let edges = graph.edges();
    let found: Vec<String> = circles(&edges)
        .into_iter()
        .map(|component| {
            let mut names: Vec<&str> = component
                .iter()
                .map(|&f| graph.files[f].path.as_str())
                .collect();
            names.sort();
            names.join(" ↔ ")
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_a_circle() {
    // The reader itself: a use line, a re-export followed to its file, a path in code.
    assert_eq!(
        expand_use("crate::a::{b, c::{d, e as f}, self}"),
        [
            vec!["crate", "a", "b"],
            vec!["crate", "a", "c", "d"],
            vec!["crate", "a", "c", "e"],
            vec!["crate", "a"],
        ]
    );
    assert_eq!(
        strip("let s = \"crate::x\"; // crate::y\nz"),
        "let s = \"\"; \nz"
    );
    let edges = vec![
        BTreeSet::from([1]),
        BTreeSet::from([2]),
        BTreeSet::from([0]),
        BTreeSet::new(),
    ];
    assert_eq!(circles(&edges).len(), 1);
    // The real graph has edges: the machine depends on the context and the assembler.
    let graph = Graph::new();
    let edges = graph.edges();
    let index = |p: &str| {
        graph
            .files
            .iter()
            .position(|f| f.path == p)
            .unwrap_or_else(|| panic!("{p}"))
    };
    let machine = index("src/agent/machine/mod.rs");
    assert!(edges[machine].contains(&index("src/wire/assemble.rs")));
    assert!(edges[machine].contains(&index("src/agent/events.rs")));
}

#[test]
fn the_machines_decide_without_a_clock_or_a_runtime() {
    let graph = Graph::new();
    let machine_room = |path: &str| path.starts_with("src/agent/machine/");
    let checked: Vec<&SourceFile> = graph
        .files
        .iter()
        .filter(|f| machine_room(&f.path) || f.path == "src/provider/transport/exchange.rs")
        .collect();
    assert!(
        checked.len() > 2,
        "the agent machine's room src/agent/machine/ and the exchange machine"
    );
    for file in checked {
        let path = &file.path;
        for forbidden in [
            "async ",
            ".await",
            "async_trait",
            "Instant::now",
            "SystemTime::now",
            "tokio",
            "futures",
        ] {
            assert!(
                !file.code.contains(forbidden),
                "{path} uses {forbidden:?}: the machine takes time and I/O from its driver"
            );
        }
        // The HTTP exchange machine reads reqwest's header and URL types; the agent's reads
        // no HTTP at all.
        if machine_room(path) {
            for forbidden in ["reqwest", "driver::"] {
                assert!(
                    !file.code.contains(forbidden),
                    "{path} names {forbidden:?}: the agent machine's room knows no HTTP and no driver"
                );
            }
        }
    }
    // The agent machine's room imports nothing from the driver's room (nor the facade's
    // async files that use it).
    let edges = graph.edges();
    for (f, file) in graph.files.iter().enumerate() {
        if !machine_room(&file.path) {
            continue;
        }
        for &dep in &edges[f] {
            let path = &graph.files[dep].path;
            assert!(
                !path.starts_with("src/agent/driver/")
                    && ![
                        "src/agent/agent.rs",
                        "src/agent/builder.rs",
                        "src/agent/team.rs",
                        "src/agent/handle.rs",
                        "src/agent/mod.rs",
                    ]
                    .contains(&path.as_str()),
                "{} imports from {path}: the machine's room imports nothing from the driver's",
                file.path
            );
        }
    }
}

#[test]
fn the_checker_sees_a_machine_file_that_imports_the_driver() {
    // The rule above reads imports as the circle check does: a path into the driver's room
    // resolves to its file.
    let graph = Graph::new();
    let machine = graph
        .files
        .iter()
        .position(|f| f.path == "src/agent/machine/mod.rs")
        .expect("the machine");
    let io = graph
        .files
        .iter()
        .position(|f| f.path == "src/agent/driver/io.rs")
        .expect("the driver's io");
    let path: Vec<String> = ["crate", "agent", "driver", "io", "Io"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(graph.resolve(machine, &path, 0), Some(io));
}

/// A file's room: the top-level module it belongs to (`src/provider/openai/mod.rs` is in
/// `provider`, `src/message.rs` in `message`).
fn room(path: &str) -> &str {
    let rest = path.strip_prefix("src/").unwrap_or(path);
    let first = rest.split('/').next().unwrap_or(rest);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// The rooms' dependencies, from their files' (the crate root's table of contents left out).
fn room_edges(graph: &Graph) -> (Vec<String>, Vec<BTreeSet<usize>>) {
    let names: Vec<String> = graph
        .files
        .iter()
        .map(|f| room(&f.path).to_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let at = |name: &str| names.iter().position(|n| n == name).expect("a room");
    let mut edges = vec![BTreeSet::new(); names.len()];
    for (f, deps) in graph.edges().into_iter().enumerate() {
        let from = at(room(&graph.files[f].path));
        for d in deps {
            let to = at(room(&graph.files[d].path));
            if to != from {
                edges[from].insert(to);
            }
        }
    }
    (names, edges)
}

#[test]
fn no_import_circles_among_the_rooms_of_src() {
    // One layer under another: `error` under everything, `wire` under `provider`, `tool` and
    // `context` under `agent`. A circle of rooms is a layer that knows of the one above it.
    let graph = Graph::new();
    let (names, edges) = room_edges(&graph);
    let found: Vec<String> = circles(&edges)
        .into_iter()
        .map(|component| {
            let mut rooms: Vec<&str> = component.iter().map(|&r| names[r].as_str()).collect();
            rooms.sort();
            rooms.join(" ↔ ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "rooms that import each other:\n{}",
        found.join("\n")
    );
    // The checker sees the layers: the error room imports none of the rooms above it.
    let at = |name: &str| names.iter().position(|n| n == name).expect(name);
    for above in ["provider", "tool", "media", "agent", "wire"] {
        assert!(
            !edges[at("error")].contains(&at(above)),
            "error imports {above}"
        );
    }
    assert!(edges[at("provider")].contains(&at("wire")));
    assert!(edges[at("agent")].contains(&at("tool")));
}

/// The circles among a set of files, each as `a ↔ b ↔ …`.
fn circles_of(graph: &Graph) -> Vec<String> {
    circles(&graph.edges())
        .into_iter()
        .map(|component| {
            let mut names: Vec<&str> = component
                .iter()
                .map(|&f| graph.files[f].path.as_str())
                .collect();
            names.sort();
            names.join(" ↔ ")
        })
        .collect()
}

#[test]
fn no_import_circles_among_the_files_of_any_other_member() {
    // Every satellite crate (and the benches' library) read as the core's `src/` is above:
    // its files import each other one way.
    let members = other_members();
    for expected in ["agent-loop-restate", "agent-loop-ui", "agent-loop-serve"] {
        assert!(
            members.iter().any(|m| m == expected),
            "{expected} is a member: {members:?}"
        );
    }
    let mut found = Vec::new();
    for member in &members {
        let files = member_source_files(member);
        assert!(!files.is_empty(), "{member} has no source files to read");
        found.extend(
            circles_of(&Graph::of(files))
                .into_iter()
                .map(|c| format!("{member}: {c}")),
        );
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_reads_super_inside_an_inline_module_as_the_file_itself() {
    let code = strip("mod live { use super::{Buffer, parse}; fn f() { super::super::x::y(); } }");
    let (uses, _) = named_paths(&code);
    assert_eq!(
        uses,
        [
            vec!["self", "Buffer"],
            vec!["self", "parse"],
            vec!["super", "x", "y"],
        ]
    );
}

#[test]
fn the_checker_reads_a_member() {
    // The Restate crate's session drives its driver, and the driver knows nothing of the
    // session: the reader sees the one edge and not the other.
    let graph = Graph::of(member_source_files("agent-loop-restate"));
    let edges = graph.edges();
    let index = |p: &str| {
        graph
            .files
            .iter()
            .position(|f| f.path == p)
            .unwrap_or_else(|| panic!("{p}"))
    };
    let session = index("agent-loop-restate/src/session.rs");
    let driver = index("agent-loop-restate/src/driver.rs");
    assert!(edges[session].contains(&driver));
    assert!(!edges[driver].contains(&session));
    assert!(edges[driver].contains(&index("agent-loop-restate/src/report.rs")));
}

/// The arms of every `match` in `code` whose patterns name `AgentEvent::` or `Action::`
/// (the machine's actions) and that has a bare `_` arm: where, and the match's first
/// pattern on those types.
fn wildcard_arms_on_events(code: &str) -> Vec<(usize, String)> {
    /// Whether `pattern` matches an `AgentEvent` or an `Action` at its top (`AgentEvent::X`,
    /// `agent_loop::AgentEvent::X { .. } | …`, `e @ Action::Y`).
    fn on_events(pattern: &str) -> bool {
        pattern.split('|').any(|alternative| {
            let alternative = alternative.trim();
            let alternative = match alternative.split_once('@') {
                Some((_, rest)) => rest.trim().trim_start_matches('('),
                None => alternative.trim_start_matches('('),
            };
            let head: String = alternative
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segments: Vec<&str> = head.split("::").collect();
            segments.len() >= 2 && matches!(segments[segments.len() - 2], "AgentEvent" | "Action")
        })
    }
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("match ") {
        let at = from + at;
        from = at + "match ".len();
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        // The body opens at the first `{` outside the scrutinee's brackets.
        let mut depth = 0i32;
        let mut i = from;
        while i < b.len() {
            match b[i] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => break,
                b';' if depth == 0 => i = b.len(),
                _ => {}
            }
            i += 1;
        }
        if i >= b.len() {
            continue;
        }
        // The arms: a pattern up to `=>`, then a block, or an expression up to a comma, at
        // the body's own depth.
        let mut patterns = Vec::new();
        let mut pos = i + 1;
        loop {
            while pos < b.len() && (b[pos].is_ascii_whitespace() || b[pos] == b',') {
                pos += 1;
            }
            if pos >= b.len() || b[pos] == b'}' {
                break;
            }
            let Some(arrow) = code[pos..].find("=>") else {
                break;
            };
            patterns.push(code[pos..pos + arrow].trim().to_owned());
            pos += arrow + 2;
            while pos < b.len() && b[pos].is_ascii_whitespace() {
                pos += 1;
            }
            let block = b.get(pos) == Some(&b'{');
            let mut depth = 0i32;
            while pos < b.len() {
                match b[pos] {
                    b'(' | b'[' | b'{' => depth += 1,
                    b')' | b']' | b'}' => {
                        if depth == 0 {
                            break; // the body's end
                        }
                        depth -= 1;
                        if block && depth == 0 {
                            pos += 1;
                            break;
                        }
                    }
                    b',' if depth == 0 => break,
                    _ => {}
                }
                pos += 1;
            }
        }
        let named = patterns.iter().find(|p| on_events(p));
        if let Some(named) = named {
            if patterns.iter().any(|p| p == "_") {
                found.push((at, named.clone()));
            }
        }
    }
    found
}

/// Library and example code of the whole workspace: every member's source files (the core's
/// `src/` without the provider and testing rooms, whose attempt machine has an `Action` of
/// its own), and every `examples/` directory.
fn library_and_example_files() -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<SourceFile> = source_files()
        .into_iter()
        .filter(|f| !f.path.starts_with("src/provider/") && !f.path.starts_with("src/testing/"))
        .collect();
    files.extend(source_files_of(&root.join("examples"), "examples", true));
    for member in other_members() {
        files.extend(member_source_files(&member));
        let examples = root.join(&member).join("examples");
        files.extend(source_files_of(
            &examples,
            &format!("{member}/examples"),
            true,
        ));
    }
    files
}

#[test]
fn no_wildcard_arm_on_agent_events_or_actions() {
    // `AgentEvent` and `Action` are exhaustive so that a new event or action fails to
    // compile until each protocol and driver decides what to do with it; a `_` arm would
    // take a new one in silently. List what is ignored, with why. (An `if let` or a
    // `matches!` that picks one kind is fine: it decides nothing about the others.)
    let files = library_and_example_files();
    assert!(files.iter().any(|f| f.path == "agent-loop-ui/src/agui.rs"));
    assert!(files.iter().any(|f| f.path == "examples/repl.rs"));
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| {
            wildcard_arms_on_events(&f.code)
                .into_iter()
                .map(move |(at, pattern)| {
                    let line = f.code[..at].matches('\n').count() + 1;
                    format!("{}:{line}: a `_` arm in the match of `{pattern}`", f.path)
                })
        })
        .collect();
    assert!(
        found.is_empty(),
        "matches on AgentEvent or Action with a `_` arm:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_a_wildcard_arm() {
    let code = strip(
        "fn f(e: &AgentEvent) -> u8 {
            match e {
                AgentEvent::TurnStart { turn } if *turn > 1 => { match turn { 2 => 0, _ => 1 } }
                agent_loop::AgentEvent::TextDelta { .. } | AgentEvent::ThinkingDelta { .. } => 2,
                _ => 3,
            }
        }
        fn g(a: Action) { match a { x @ (Action::Emit(_) | Action::Checkpoint) => drop(x), _ => {} } }
        fn h(a: Option<u8>) -> u8 { match a { Some(_) => 1, _ => 0 } }
        fn k(e: &AgentEvent) -> u8 { match e { AgentEvent::Finished(_) => 1, other => 0 } }",
    );
    let found = wildcard_arms_on_events(&code);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].1.starts_with("AgentEvent::TurnStart"));
    assert!(found[1].1.starts_with("x @ (Action::Emit"));
}

/// ARCHITECTURE.md's layers, the lowest first: a room imports only rooms of its own layer or
/// of the layers below it.
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["message", "media", "input"],
    &["pricing"],
    &["wire"],
    &["tool"],
    &["provider"],
    &["context"],
    &["session"],
    &["testing"],
    &["agent"],
    &["lib", "serde_tests"],
];

/// The imports of `edges` that go up `LAYERS`, as `from -> to`.
fn imports_up(names: &[String], edges: &[BTreeSet<usize>]) -> Vec<String> {
    let layer = |name: &str| {
        LAYERS
            .iter()
            .position(|layer| layer.contains(&name))
            .unwrap_or_else(|| panic!("the room {name} is in no layer: add it to LAYERS"))
    };
    let mut up = Vec::new();
    for (from, targets) in edges.iter().enumerate() {
        for &to in targets {
            if layer(&names[to]) > layer(&names[from]) {
                up.push(format!("{} -> {}", names[from], names[to]));
            }
        }
    }
    up
}

#[test]
fn every_room_imports_only_the_layers_below_it() {
    let graph = Graph::new();
    let (names, edges) = room_edges(&graph);
    let up = imports_up(&names, &edges);
    assert!(up.is_empty(), "imports up the layers:\n{}", up.join("\n"));
}

#[test]
fn the_checker_sees_an_import_up_the_layers() {
    let names: Vec<String> = ["wire", "provider"].map(String::from).to_vec();
    let edges = vec![BTreeSet::from([1]), BTreeSet::new()];
    assert_eq!(imports_up(&names, &edges), ["wire -> provider"]);
}

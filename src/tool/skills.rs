//! Agent Skills (the open `SKILL.md` format, agentskills.io): folders of instructions an agent
//! loads on demand.
//!
//! A skill is a folder holding a `SKILL.md`: YAML front matter between `---` lines with a
//! `name` (1–64 lowercase letters, digits and single hyphens, not at either end; the folder's
//! own name) and a `description` (1–1,024 characters; what the skill does and when to use it),
//! optionally `license`, `compatibility` (at most 500 characters), `metadata` (a map of strings)
//! and `allowed-tools`; then Markdown instructions. Other files of the folder (`scripts/`,
//! `references/`, `assets/` …) are the skill's bundled files.
//!
//! [`Skills::load`] reads every skill folder under a directory. The model sees each skill's
//! name and description in the system prompt ([`Skills::system_prompt`]); as a
//! [`ToolSource`] the skills add two tools: `load_skill` returns a skill's instructions and
//! the list of its files, `read_skill_file` returns one of those files, confined to the
//! skill's folder (a relative path without `..`, resolved with symlinks and checked to be
//! inside the folder, at most [`MAX_FILE_BYTES`], UTF-8 text).
//!
//! ```no_run
//! use agent_loop::{Agent, AnthropicClient};
//! use agent_loop::tool::Skills;
//!
//! let skills = Skills::load("skills")?;
//! let agent = Agent::builder(AnthropicClient::from_env()?)
//!     .system(skills.system_prompt("You are a helpful assistant."))
//!     .tool_source(skills)
//!     .build()?;
//! # Ok::<(), agent_loop::Error>(())
//! ```
//!
//! No builder method of its own: the prompt text goes through [`system`] and the tools through
//! [`tool_source`], the one way each is set.
//!
//! [`system`]: crate::AgentBuilder::system
//! [`tool_source`]: crate::AgentBuilder::tool_source

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolOutput, ToolRegistry, ToolSource};
use crate::error::{ConfigError, Error, ToolError};

/// The largest `SKILL.md` read (256 KiB).
pub const MAX_SKILL_BYTES: u64 = 256 * 1024;
/// The largest bundled file `read_skill_file` returns (256 KiB).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// The most skills one directory may hold.
pub const MAX_SKILLS: usize = 1_000;
/// The most files `load_skill` lists for a skill (deeper or further ones are not listed, but
/// can still be read by path).
const MAX_LISTED_FILES: usize = 200;
/// How deep `load_skill` looks for a skill's files.
const MAX_LIST_DEPTH: usize = 4;

/// Why skills could not be loaded; each names the file or folder at fault.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    /// A file or folder could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        message: String,
    },
    /// A `SKILL.md` is not a valid skill: its front matter, a field, or its size.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The `SKILL.md`.
        path: PathBuf,
        /// The line at fault (1-based; 1 when it is the file as a whole).
        line: usize,
        /// What is wrong and what the format asks for.
        message: String,
    },
    /// Two skills have the same name.
    #[error("{path}: a skill named {name:?} is already loaded")]
    Duplicate {
        /// The second `SKILL.md`.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// More skills than [`MAX_SKILLS`].
    #[error("{path}: more than {limit} skills")]
    TooMany {
        /// The directory.
        path: PathBuf,
        /// The limit.
        limit: usize,
    },
}

impl From<SkillError> for Error {
    fn from(error: SkillError) -> Self {
        Error::Config(ConfigError::setting("skills", error.to_string()))
    }
}

/// One skill: its front matter, its instructions and its folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    name: String,
    description: String,
    license: Option<String>,
    compatibility: Option<String>,
    metadata: BTreeMap<String, String>,
    allowed_tools: Option<String>,
    instructions: String,
    dir: PathBuf,
}

impl Skill {
    /// Reads and checks the skill in `dir` (its `SKILL.md`).
    ///
    /// # Errors
    ///
    /// [`SkillError::Io`] when `SKILL.md` cannot be read, [`SkillError::Malformed`] when it is
    /// not a valid skill (naming the file and line).
    pub fn load(dir: impl AsRef<Path>) -> Result<Skill, SkillError> {
        let dir = dir.as_ref();
        let io = |path: &Path, e: std::io::Error| SkillError::Io {
            path: path.to_owned(),
            message: e.to_string(),
        };
        let dir = dir.canonicalize().map_err(|e| io(dir, e))?;
        let file = dir.join("SKILL.md");
        let size = std::fs::metadata(&file).map_err(|e| io(&file, e))?.len();
        if size > MAX_SKILL_BYTES {
            return Err(SkillError::Malformed {
                path: file,
                line: 1,
                message: format!("{size} bytes, over the {MAX_SKILL_BYTES} a SKILL.md may have"),
            });
        }
        let text = std::fs::read_to_string(&file).map_err(|e| io(&file, e))?;
        let folder = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        parse(&text, &folder, dir).map_err(|(line, message)| SkillError::Malformed {
            path: file,
            line,
            message,
        })
    }

    /// The skill's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the skill does and when to use it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The `license` field.
    pub fn license(&self) -> Option<&str> {
        self.license.as_deref()
    }

    /// The `compatibility` field.
    pub fn compatibility(&self) -> Option<&str> {
        self.compatibility.as_deref()
    }

    /// The `metadata` map.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The `allowed-tools` field (experimental in the format; not enforced here).
    pub fn allowed_tools(&self) -> Option<&str> {
        self.allowed_tools.as_deref()
    }

    /// The Markdown after the front matter.
    pub fn instructions(&self) -> &str {
        &self.instructions
    }

    /// The skill's folder (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bundled file at `relative` (a path inside the skill's folder), read as UTF-8 text.
    ///
    /// # Errors
    ///
    /// A message for the model when the path is absolute, has a `..` component, leads
    /// (through symlinks too) outside the folder, is not a file, is larger than
    /// [`MAX_FILE_BYTES`] or is not UTF-8. A `.` component and a doubled `/` change nothing:
    /// `./references/guide.md` and `references//guide.md` read `references/guide.md`.
    pub async fn read_file(&self, relative: &str) -> Result<String, String> {
        let path = confine(&self.dir, relative)?;
        use tokio::io::AsyncReadExt;
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| format!("{relative}: {e}"))?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| format!("{relative}: {e}"))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(format!(
                "{relative} is larger than {MAX_FILE_BYTES} bytes; it cannot be read whole"
            ));
        }
        String::from_utf8(bytes).map_err(|_| format!("{relative} is not UTF-8 text"))
    }

    /// The skill's files (relative paths, `/`-separated, sorted), `SKILL.md` left out; at
    /// most a few levels deep and a few hundred.
    pub fn files(&self) -> Vec<String> {
        let mut found = Vec::new();
        list(&self.dir, &self.dir, 0, &mut found);
        found.sort();
        found
    }
}

/// Resolves `relative` inside `root` (canonical), refusing every way out.
pub(crate) fn confine(root: &Path, relative: &str) -> Result<PathBuf, String> {
    if relative.is_empty() {
        return Err("the path is empty; give a path relative to the skill's folder".to_owned());
    }
    if relative.len() > 1_024 || relative.contains('\0') {
        return Err("the path is not a usable file name".to_owned());
    }
    let given = Path::new(relative);
    for component in given.components() {
        match component {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "{relative}: '..' is not allowed; paths stay inside the skill's folder"
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "{relative}: absolute paths are not allowed; give a path relative to the \
                     skill's folder"
                ))
            }
        }
    }
    let joined = root.join(given);
    let resolved = joined
        .canonicalize()
        .map_err(|_| format!("{relative}: no such file in the skill's folder"))?;
    if !resolved.starts_with(root) {
        return Err(format!(
            "{relative} leads outside the skill's folder (through a symlink); it cannot be read"
        ));
    }
    if !resolved.is_file() {
        return Err(format!("{relative} is not a file"));
    }
    Ok(resolved)
}

fn list(root: &Path, dir: &Path, depth: usize, out: &mut Vec<String>) {
    if depth > MAX_LIST_DEPTH || out.len() >= MAX_LISTED_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() >= MAX_LISTED_FILES {
            return;
        }
        let path = entry.path();
        // Symlinks are followed only where they stay inside the folder.
        let Ok(resolved) = path.canonicalize() else {
            continue;
        };
        if !resolved.starts_with(root) {
            continue;
        }
        if resolved.is_dir() {
            list(root, &path, depth + 1, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let relative: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let relative = relative.join("/");
            if relative != "SKILL.md" {
                out.push(relative);
            }
        }
    }
}

/// The front matter's fields as the format names them.
#[derive(Default)]
struct Fields {
    name: Option<(usize, String)>,
    description: Option<(usize, String)>,
    license: Option<String>,
    compatibility: Option<(usize, String)>,
    metadata: BTreeMap<String, String>,
    allowed_tools: Option<String>,
}

/// Parses a `SKILL.md`; an error is its line and message.
fn parse(text: &str, folder: &str, dir: PathBuf) -> Result<Skill, (usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_end() == "---" => {}
        _ => {
            return Err((
                1,
                "a SKILL.md starts with YAML front matter: a line '---', the fields \
                 (name, description …), and another '---'"
                    .to_owned(),
            ))
        }
    }
    let mut front: Vec<(usize, &str)> = Vec::new();
    let mut body_start = None;
    for (i, line) in lines.by_ref() {
        if line.trim_end() == "---" {
            body_start = Some(i + 1);
            break;
        }
        front.push((i + 1, line));
    }
    let Some(body_start) = body_start else {
        return Err((1, "the front matter has no closing '---' line".to_owned()));
    };
    let fields = front_matter(&front)?;
    let Some((line, name)) = fields.name else {
        return Err((1, "the front matter has no 'name' (required)".to_owned()));
    };
    check_name(&name).map_err(|m| (line, m))?;
    if name != folder {
        return Err((
            line,
            format!("the name {name:?} is not the skill's folder name {folder:?}; they must be the same"),
        ));
    }
    let Some((line, description)) = fields.description else {
        return Err((
            1,
            "the front matter has no 'description' (required)".to_owned(),
        ));
    };
    let chars = description.chars().count();
    if description.trim().is_empty() || chars > 1_024 {
        return Err((
            line,
            format!("the description must be 1 to 1024 characters, not {chars}"),
        ));
    }
    if let Some((line, compatibility)) = &fields.compatibility {
        let chars = compatibility.chars().count();
        if chars > 500 {
            return Err((
                *line,
                format!("compatibility may have at most 500 characters, not {chars}"),
            ));
        }
    }
    let body: Vec<&str> = text.lines().skip(body_start).collect();
    Ok(Skill {
        name,
        description,
        license: fields.license,
        compatibility: fields.compatibility.map(|(_, c)| c),
        metadata: fields.metadata,
        allowed_tools: fields.allowed_tools,
        instructions: body.join("\n").trim().to_owned(),
        dir,
    })
}

/// The format's rule for names: 1–64 of `a-z`, `0-9` and `-`, no hyphen first, last or twice.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the name {name:?} is not valid: 1 to 64 lowercase letters, digits and hyphens, \
             not starting or ending with a hyphen, no two hyphens in a row"
        ))
    }
}

/// The YAML the format's fields use (a subset, written here rather than a YAML crate for a
/// handful of scalar fields): `key: value` lines with plain, quoted or block (`|`,
/// `>`) scalars, and `metadata` as an indented map of such pairs. Anything else (flow
/// collections, anchors, tags) is an error naming the line.
fn front_matter(lines: &[(usize, &str)]) -> Result<Fields, (usize, String)> {
    let mut fields = Fields::default();
    let mut i = 0;
    while i < lines.len() {
        let (number, line) = lines[i];
        i += 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err((
                number,
                "an indented line where a field was expected".to_owned(),
            ));
        }
        let (key, rest) = split_key(line).ok_or_else(|| {
            (
                number,
                format!("expected 'key: value', found {:?}", cut(line)),
            )
        })?;
        let rest = rest.trim();
        if key == "metadata" {
            if !rest.is_empty() && rest != "{}" {
                return Err((
                    number,
                    "metadata is a map: its entries go on indented lines below it".to_owned(),
                ));
            }
            while i < lines.len()
                && (lines[i].1.starts_with([' ', '\t']) || lines[i].1.trim().is_empty())
            {
                let (n, entry) = lines[i];
                i += 1;
                if entry.trim().is_empty() || entry.trim_start().starts_with('#') {
                    continue;
                }
                let (k, v) = split_key(entry.trim_start()).ok_or_else(|| {
                    (
                        n,
                        format!("expected 'key: value' in metadata, found {:?}", cut(entry)),
                    )
                })?;
                let v = scalar(v.trim(), n, &[], &mut 0)?;
                fields.metadata.insert(unquote(k, n)?, v);
            }
            continue;
        }
        let value = scalar(rest, number, lines, &mut i)?;
        match key {
            "name" => fields.name = Some((number, value)),
            "description" => fields.description = Some((number, value)),
            "license" => fields.license = Some(value),
            "compatibility" => fields.compatibility = Some((number, value)),
            "allowed-tools" => fields.allowed_tools = Some(value),
            // Fields the format does not define are ignored, as other readers do.
            _ => {}
        }
    }
    Ok(fields)
}

fn cut(line: &str) -> String {
    line.chars().take(60).collect()
}

/// `key: rest`, the key plain or quoted.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let colon = line
        .find(": ")
        .or_else(|| line.strip_suffix(':').map(|l| l.len()))?;
    let key = line[..colon].trim();
    if key.is_empty() {
        return None;
    }
    Some((key, &line[(colon + 1).min(line.len())..]))
}

fn unquote(key: &str, line: usize) -> Result<String, (usize, String)> {
    scalar(key, line, &[], &mut 0)
}

/// One scalar value: `rest` (after `key:`) and, for a block scalar or a plain value continued
/// on indented lines, the lines from `*next` on (advanced past what it takes).
fn scalar(
    rest: &str,
    line: usize,
    lines: &[(usize, &str)],
    next: &mut usize,
) -> Result<String, (usize, String)> {
    let unsupported = |what: &str| {
        Err((line, format!("{what} is not supported in a skill's front matter; write the value as plain text or a quoted string")))
    };
    if let Some(indicator) = rest.strip_prefix(['|', '>']) {
        let folded = rest.starts_with('>');
        let chomp = indicator.trim();
        if !matches!(chomp, "" | "-" | "+") {
            return unsupported(
                "a block scalar indicator other than '|', '>', '|-', '>-', '|+', '>+'",
            );
        }
        let mut block: Vec<&str> = Vec::new();
        let mut indent = None;
        while *next < lines.len() {
            let text = lines[*next].1;
            if !text.trim().is_empty() && !text.starts_with([' ', '\t']) {
                break;
            }
            *next += 1;
            if text.trim().is_empty() {
                block.push("");
                continue;
            }
            let width = text.len() - text.trim_start().len();
            let indent = *indent.get_or_insert(width);
            block.push(text.get(indent.min(width)..).unwrap_or(""));
        }
        while block.last() == Some(&"") {
            block.pop();
        }
        let joined = if folded {
            let mut out = String::new();
            for (k, part) in block.iter().enumerate() {
                if k > 0 {
                    out.push(if part.is_empty() || block[k - 1].is_empty() {
                        '\n'
                    } else {
                        ' '
                    });
                }
                out.push_str(part);
            }
            out
        } else {
            block.join("\n")
        };
        // Trailing line breaks are dropped whatever the chomping indicator: a field's value
        // ends with its text.
        return Ok(joined);
    }
    if rest.starts_with(['[', '{']) {
        return unsupported("a flow collection ('[…]' or '{…}')");
    }
    if rest.starts_with(['&', '*', '!']) {
        return unsupported("an anchor, alias or tag");
    }
    if let Some(inner) = rest.strip_prefix('"') {
        let Some(end) = inner.rfind('"') else {
            return Err((
                line,
                "a double-quoted value without its closing quote".to_owned(),
            ));
        };
        let quoted = format!("\"{}\"", &inner[..end]);
        return serde_json::from_str::<String>(&quoted).map_err(|_| {
            (
                line,
                "a double-quoted value with an escape JSON does not know".to_owned(),
            )
        });
    }
    if let Some(inner) = rest.strip_prefix('\'') {
        let Some(end) = inner.rfind('\'') else {
            return Err((
                line,
                "a single-quoted value without its closing quote".to_owned(),
            ));
        };
        return Ok(inner[..end].replace("''", "'"));
    }
    // A plain scalar, perhaps continued on indented lines (folded with spaces); a comment
    // after " #" ends it.
    let mut value = strip_comment(rest).to_owned();
    while *next < lines.len() && lines[*next].1.starts_with([' ', '\t']) {
        let more = strip_comment(lines[*next].1.trim());
        *next += 1;
        if !more.is_empty() {
            if !value.is_empty() {
                value.push(' ');
            }
            value.push_str(more);
        }
    }
    Ok(value)
}

fn strip_comment(text: &str) -> &str {
    match text.find(" #") {
        Some(at) => text[..at].trim_end(),
        None if text.starts_with('#') => "",
        None => text.trim_end(),
    }
}

/// The skills of a directory: each sub-folder with a `SKILL.md`. Cheap to clone (shared).
/// As a [`ToolSource`] it adds `load_skill` and `read_skill_file`.
#[derive(Clone)]
pub struct Skills {
    skills: Arc<Vec<Skill>>,
}

impl fmt::Debug for Skills {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.skills.iter().map(Skill::name))
            .finish()
    }
}

impl Skills {
    /// Loads every skill folder under `dir` (its sub-folders holding a `SKILL.md`, in name
    /// order); other entries are left alone.
    ///
    /// # Errors
    ///
    /// The first [`SkillError`]: a folder that cannot be read, a malformed `SKILL.md` (named,
    /// with the line), two skills of one name, more than [`MAX_SKILLS`].
    pub fn load(dir: impl AsRef<Path>) -> Result<Skills, SkillError> {
        let dir = dir.as_ref();
        let io = |e: std::io::Error| SkillError::Io {
            path: dir.to_owned(),
            message: e.to_string(),
        };
        let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.join("SKILL.md").is_file())
            .collect();
        folders.sort();
        if folders.len() > MAX_SKILLS {
            return Err(SkillError::TooMany {
                path: dir.to_owned(),
                limit: MAX_SKILLS,
            });
        }
        let mut skills: Vec<Skill> = Vec::with_capacity(folders.len());
        for folder in folders {
            let skill = Skill::load(&folder)?;
            if skills.iter().any(|s| s.name == skill.name) {
                return Err(SkillError::Duplicate {
                    path: folder.join("SKILL.md"),
                    name: skill.name,
                });
            }
            skills.push(skill);
        }
        Ok(Skills {
            skills: Arc::new(skills),
        })
    }

    /// These skills, from skills loaded one by one ([`Skill::load`]).
    ///
    /// # Errors
    ///
    /// [`SkillError::Duplicate`] when two share a name.
    pub fn from_skills(skills: impl IntoIterator<Item = Skill>) -> Result<Skills, SkillError> {
        let mut all: Vec<Skill> = Vec::new();
        for skill in skills {
            if all.iter().any(|s| s.name == skill.name) {
                return Err(SkillError::Duplicate {
                    path: skill.dir.join("SKILL.md"),
                    name: skill.name,
                });
            }
            all.push(skill);
        }
        Ok(Skills {
            skills: Arc::new(all),
        })
    }

    /// The skills, in name order.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// The skill of this name.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// `base` followed by the skills' catalog: each skill's name and description, and how to
    /// load one. With no skills, `base` alone.
    pub fn system_prompt(&self, base: &str) -> String {
        if self.skills.is_empty() {
            return base.to_owned();
        }
        let mut prompt = String::from(base);
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str(
            "You have these skills. When a task matches a skill's description, call \
             load_skill with its name to get its instructions before you start; read the \
             files it mentions with read_skill_file.\n\n<available_skills>\n",
        );
        for skill in self.skills.iter() {
            prompt.push_str(&format!(
                "<skill>\n<name>{}</name>\n<description>{}</description>\n</skill>\n",
                skill.name, skill.description
            ));
        }
        prompt.push_str("</available_skills>");
        prompt
    }

    fn unknown(&self, name: &str) -> ToolError {
        let names: Vec<&str> = self.skills.iter().map(Skill::name).collect();
        ToolError::new(format!(
            "no skill named {name:?}; the skills are: {}",
            names.join(", ")
        ))
    }
}

impl ToolSource for Skills {
    fn changed(&self) -> bool {
        false
    }

    fn refresh(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn register(&self, registry: &mut ToolRegistry) -> Result<usize, Error> {
        if self.skills.is_empty() {
            return Ok(0);
        }
        registry.register(LoadSkill(self.clone()))?;
        registry.register(ReadSkillFile(self.clone()))?;
        Ok(2)
    }
}

/// The input of `load_skill`.
#[derive(Deserialize, schemars::JsonSchema)]
struct LoadSkillInput {
    /// The skill's name, as listed in the system prompt.
    name: String,
}

/// `load_skill`: a skill's instructions and the list of its files.
struct LoadSkill(Skills);

#[async_trait::async_trait]
impl Tool for LoadSkill {
    type Input = LoadSkillInput;

    fn name(&self) -> &str {
        "load_skill"
    }

    fn description(&self) -> &str {
        "Loads a skill's full instructions (and the list of its bundled files) by the skill's \
         name. Call it when a task matches a skill listed in the system prompt."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(
        &self,
        input: LoadSkillInput,
        _ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let skill = self
            .0
            .get(&input.name)
            .ok_or_else(|| self.0.unknown(&input.name))?;
        let files = tokio::task::spawn_blocking({
            let skill = skill.clone();
            move || skill.files()
        })
        .await
        .unwrap_or_default();
        let mut text = skill.instructions.clone();
        if !files.is_empty() {
            text.push_str(&format!(
                "\n\n<skill_files skill={:?}>\n{}\n</skill_files>\nRead one with read_skill_file.",
                skill.name,
                files.join("\n")
            ));
        }
        Ok(ToolOutput::text(text))
    }
}

/// The input of `read_skill_file`.
#[derive(Deserialize, schemars::JsonSchema)]
struct ReadSkillFileInput {
    /// The skill's name.
    skill: String,
    /// The file's path inside the skill's folder, relative (e.g. `references/guide.md`).
    path: String,
}

/// `read_skill_file`: one of a skill's bundled files.
struct ReadSkillFile(Skills);

#[async_trait::async_trait]
impl Tool for ReadSkillFile {
    type Input = ReadSkillFileInput;

    fn name(&self) -> &str {
        "read_skill_file"
    }

    fn description(&self) -> &str {
        "Reads a file bundled with a skill (a path relative to the skill's folder, as \
         load_skill lists them)."
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn call(
        &self,
        input: ReadSkillFileInput,
        _ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let skill = self
            .0
            .get(&input.skill)
            .ok_or_else(|| self.0.unknown(&input.skill))?;
        let text = skill.read_file(&input.path).await.map_err(ToolError::new)?;
        Ok(ToolOutput::text(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Skill, (usize, String)> {
        parse(text, "pdf-tools", PathBuf::from("/x/pdf-tools"))
    }

    #[test]
    fn front_matter_fields_and_body() {
        let skill = parsed(
            "---\nname: pdf-tools\ndescription: >\n  Extracts text from PDFs.\n  Use for PDFs.\n\
             license: 'Apache-2.0'\ncompatibility: \"Needs \\\"pdftotext\\\"\"\nmetadata:\n  \
             author: me  # a comment\n  \"version\": \"1.0\"\nallowed-tools: Bash Read\n\
             x-extra: ignored\n---\n# PDF tools\n\nStep one.\n",
        )
        .unwrap();
        assert_eq!(skill.name(), "pdf-tools");
        assert_eq!(
            skill.description(),
            "Extracts text from PDFs. Use for PDFs."
        );
        assert_eq!(skill.license(), Some("Apache-2.0"));
        assert_eq!(skill.compatibility(), Some("Needs \"pdftotext\""));
        assert_eq!(skill.metadata()["author"], "me");
        assert_eq!(skill.metadata()["version"], "1.0");
        assert_eq!(skill.allowed_tools(), Some("Bash Read"));
        assert_eq!(skill.instructions(), "# PDF tools\n\nStep one.");
        let literal = parsed("---\nname: pdf-tools\ndescription: |\n  a\n  b\n---\n").unwrap();
        assert_eq!(literal.description(), "a\nb");
        let continued = parsed("---\nname: pdf-tools\ndescription: one\n  two\n---\nbody").unwrap();
        assert_eq!(continued.description(), "one two");
    }

    #[test]
    fn malformed_skills_say_which_line_and_why() {
        let cases = [
            ("no front matter", 1, "starts with YAML front matter"),
            ("---\nname: pdf-tools\n", 1, "no closing"),
            ("---\ndescription: d\n---\n", 1, "no 'name'"),
            ("---\nname: pdf-tools\n---\n", 1, "no 'description'"),
            (
                "---\nname: PDF-Tools\ndescription: d\n---\n",
                2,
                "not valid",
            ),
            (
                "---\nname: pdf--tools\ndescription: d\n---\n",
                2,
                "not valid",
            ),
            ("---\nname: other\ndescription: d\n---\n", 2, "folder name"),
            (
                "---\nname: pdf-tools\ndescription: [a, b]\n---\n",
                3,
                "flow collection",
            ),
            (
                "---\nname: pdf-tools\ndescription: \"open\n---\n",
                3,
                "closing quote",
            ),
            (
                "---\nname: pdf-tools\ndescription: d\njunk\n---\n",
                4,
                "expected 'key: value'",
            ),
            (
                "---\nname: pdf-tools\ndescription: \"\"\n---\n",
                3,
                "1 to 1024",
            ),
        ];
        for (text, line, words) in cases {
            let (at, message) = parsed(text).unwrap_err();
            assert_eq!(at, line, "{text:?}: {message}");
            assert!(message.contains(words), "{text:?}: {message}");
        }
        let long = format!(
            "---\nname: pdf-tools\ndescription: {}\n---\n",
            "d".repeat(1_025)
        );
        assert!(parsed(&long).unwrap_err().1.contains("1 to 1024"));
    }

    #[test]
    fn names_follow_the_format() {
        for good in ["a", "pdf", "pdf-tools", "a1-b2", &"a".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "A",
            "a_b",
            "a b",
            &"a".repeat(65),
            "é",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        /// Any text parses or fails with a line inside the file; it never panics.
        #[test]
        fn any_text_parses_or_names_a_line(text in "(---\n)?([a-z:|>\"' #\\[\\-\n]{0,80})(---\n)?[a-z\n]{0,10}") {
            match parsed(&text) {
                Ok(skill) => proptest::prop_assert_eq!(skill.name(), "pdf-tools"),
                Err((line, _)) => proptest::prop_assert!(line >= 1 && line <= text.lines().count().max(1)),
            }
        }
    }
}

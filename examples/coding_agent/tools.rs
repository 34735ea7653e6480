//! The coding agent's tools: `bash`, `read_file`, `write_file` and `edit_file`, confined to
//! one working directory.
//!
//! Confinement ([`Workspace`]): every path the model passes is resolved against the working
//! directory. A path is refused when it leaves the directory, whichever way it tries:
//!
//! - `..` components that climb above the directory (checked lexically first, for a clear
//!   message);
//! - absolute paths outside the directory (absolute paths inside it are fine);
//! - symbolic links (of the file itself or of any parent folder) whose target lies outside:
//!   the path is canonicalized and must stay under the canonical directory;
//! - for writes, a path that does not exist yet is checked through its nearest existing
//!   ancestor, which must resolve inside the directory; a dangling symbolic link is refused
//!   (writing through it would create its target, wherever that is).
//!
//! The tools then operate on the resolved path, never on the model's text. The check and the
//! operation are not atomic: a process outside the agent that swaps a folder for a symbolic
//! link in between could still redirect a write. The agent's own `bash` tool cannot race
//! the file tools: it is [`Concurrency::Exclusive`], so it never runs beside them. The `bash`
//! tool itself is not a sandbox (a command can `cd /` and do anything the user can); it only
//! starts in the working directory. Run the agent in a container or VM for real isolation.
//!
//! Output is bounded everywhere: [`HeadTail`] keeps the first and last bytes of a long output
//! with a marker saying how much was left out, and never holds more than its limit while
//! reading.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::tool::Concurrency;
use agent_loop::{async_trait, Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// The default longest output a tool returns (per stream for `bash`), in bytes.
pub const DEFAULT_MAX_OUTPUT: usize = 30 * 1024;
/// The largest file `edit_file` will load.
pub const MAX_EDIT_FILE: u64 = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Confinement

/// The working directory the tools are confined to.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical: absolute, no symbolic links, no `.` or `..`.
    root: PathBuf,
}

impl Workspace {
    /// Confines tools to `root`, which must be an existing directory.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Self> {
        let root = std::fs::canonicalize(root.as_ref())?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a directory", root.display()),
            ));
        }
        Ok(Workspace { root })
    }

    /// The canonical working directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` as shown to the model: relative to the working directory when inside it.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    /// `path` joined to the working directory with `.` and `..` resolved lexically (no file
    /// system access). Relative paths that climb above the directory are refused here.
    pub fn lexical(&self, path: &str) -> Result<PathBuf, ToolError> {
        if path.trim().is_empty() {
            return Err(ToolError::new(
                "the path is empty; pass a path relative to the working directory",
            ));
        }
        if path.contains('\0') {
            return Err(ToolError::new("the path contains a NUL byte"));
        }
        let given = Path::new(path);
        let absolute = given.is_absolute();
        let mut out = if absolute {
            PathBuf::new()
        } else {
            self.root.clone()
        };
        for component in given.components() {
            match component {
                Component::Prefix(p) => out.push(p.as_os_str()),
                Component::RootDir => out.push(Component::RootDir.as_os_str()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !absolute && out == self.root {
                        return Err(self.outside(path, ": its `..` climbs out of it"));
                    }
                    out.pop();
                }
                Component::Normal(name) => out.push(name),
            }
        }
        Ok(out)
    }

    /// Resolves a path that must exist (for reading and editing): symbolic links are
    /// followed and the result must be inside the working directory.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, ToolError> {
        let lexical = self.lexical(path)?;
        let canonical = match std::fs::canonicalize(&lexical) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A dangling link reports NotFound too; say which.
                if std::fs::symlink_metadata(&lexical).is_ok() {
                    return Err(ToolError::new(format!(
                        "refused: {path:?} is a symbolic link whose target does not exist"
                    )));
                }
                if !lexical.starts_with(&self.root) {
                    return Err(self.outside(path, ""));
                }
                return Err(ToolError::new(format!(
                    "no such file: {path:?} (paths are relative to the working directory)"
                )));
            }
            Err(e) => return Err(ToolError::new(format!("cannot resolve {path:?}: {e}"))),
        };
        self.check_inside(path, &lexical, &canonical)?;
        Ok(canonical)
    }

    /// Resolves a path to write (it may not exist yet): its nearest existing ancestor is
    /// canonicalized and must be inside the working directory; the missing components are
    /// plain names appended to it. Returns the path to write.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, ToolError> {
        let lexical = self.lexical(path)?;
        let mut existing = lexical.clone();
        let mut missing = Vec::new();
        loop {
            match std::fs::symlink_metadata(&existing) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let Some(name) = existing.file_name().map(|n| n.to_owned()) else {
                        return Err(ToolError::new(format!("cannot resolve {path:?}")));
                    };
                    missing.push(name);
                    if !existing.pop() {
                        return Err(ToolError::new(format!("cannot resolve {path:?}")));
                    }
                }
                Err(e) => return Err(ToolError::new(format!("cannot resolve {path:?}: {e}"))),
            }
        }
        let canonical = match std::fs::canonicalize(&existing) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ToolError::new(format!(
                    "refused: {} is a symbolic link whose target does not exist; writing \
                     through it could create a file outside the working directory",
                    self.display(&existing)
                )));
            }
            Err(e) => return Err(ToolError::new(format!("cannot resolve {path:?}: {e}"))),
        };
        self.check_inside(path, &existing, &canonical)?;
        let mut target = canonical;
        for name in missing.iter().rev() {
            target.push(name);
        }
        Ok(target)
    }

    fn check_inside(&self, path: &str, lexical: &Path, canonical: &Path) -> Result<(), ToolError> {
        if canonical.starts_with(&self.root) {
            return Ok(());
        }
        if lexical.starts_with(&self.root) {
            Err(ToolError::new(format!(
                "refused: {path:?} leads through a symbolic link to {}, which is outside the \
                 working directory {}",
                canonical.display(),
                self.root.display()
            )))
        } else {
            Err(self.outside(path, ""))
        }
    }

    fn outside(&self, path: &str, detail: &str) -> ToolError {
        ToolError::new(format!(
            "refused: {path:?} is outside the working directory {}{detail}; use a path \
             inside it, relative to it",
            self.root.display()
        ))
    }

    /// The key that orders calls on the same file ([`Concurrency::Keyed`]).
    fn key(&self, path: &str) -> Concurrency {
        let key = match self.lexical(path) {
            Ok(p) => p.display().to_string(),
            Err(_) => path.to_owned(),
        };
        Concurrency::Keyed(format!("file:{key}"))
    }
}

// ---------------------------------------------------------------------------------------------
// Bounded output

/// Collects a byte stream keeping at most `head` bytes of its start and `tail` bytes of its
/// end, and counts the rest. Memory stays bounded whatever the stream's length.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    total: u64,
}

impl HeadTail {
    /// Keeps `max` bytes: two thirds from the start, one third from the end.
    pub fn new(max: usize) -> Self {
        let tail_max = max / 3;
        HeadTail {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_max: max - tail_max,
            tail_max,
            total: 0,
        }
    }

    /// Appends bytes.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_max.saturating_sub(self.head.len());
        let take = room.min(data.len());
        self.head.extend_from_slice(&data[..take]);
        data = &data[take..];
        if data.is_empty() {
            return;
        }
        if data.len() >= self.tail_max {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_max..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_max);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    /// Bytes seen in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes left out.
    pub fn omitted(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// Whether nothing was seen.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The kept text (invalid UTF-8 replaced), with a marker where bytes were left out.
    pub fn into_text(self) -> String {
        let omitted = self.omitted();
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        let tail: Vec<u8> = self.tail.into_iter().collect();
        if omitted > 0 {
            text.push_str(&format!(
                "\n[... {omitted} bytes omitted: the output was longer than the limit ...]\n"
            ));
        }
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

// ---------------------------------------------------------------------------------------------
// read_file

/// `read_file`'s input.
#[derive(Debug, Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct ReadFileInput {
    /// The file to read, relative to the working directory.
    pub path: String,
}

/// Reads a text file (long files are cut in the middle).
#[derive(Debug, Clone)]
pub struct ReadFile {
    ws: Arc<Workspace>,
    max_output: usize,
}

impl ReadFile {
    /// A `read_file` tool confined to `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        ReadFile {
            ws,
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }

    /// The longest text returned (default [`DEFAULT_MAX_OUTPUT`]).
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes.max(16);
        self
    }
}

#[async_trait]
impl Tool for ReadFile {
    type Input = ReadFileInput;

    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Reads a text file in the working directory and returns its content. Very long files \
         are shortened in the middle."
    }

    fn read_only(&self) -> bool {
        true
    }

    fn concurrency(&self, input: &ReadFileInput) -> Concurrency {
        self.ws.key(&input.path)
    }

    async fn call(&self, input: ReadFileInput, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = self.ws.resolve_existing(&input.path)?;
        let shown = self.ws.display(&path);
        let io_err = |e: io::Error| ToolError::new(format!("cannot read {shown}: {e}"));
        let mut file = tokio::fs::File::open(&path).await.map_err(io_err)?;
        let meta = file.metadata().await.map_err(io_err)?;
        if meta.is_dir() {
            return Err(ToolError::new(format!(
                "{shown} is a directory; use bash with `ls` to list it"
            )));
        }
        // Read the head, then jump to the tail: a huge file is never read whole.
        let mut kept = HeadTail::new(self.max_output);
        let mut buf = vec![0u8; 64 * 1024];
        let head_max = kept.head_max as u64;
        let mut read = 0u64;
        loop {
            if read >= head_max && meta.len() > read + kept.tail_max as u64 {
                let skip_to = meta.len() - kept.tail_max as u64;
                file.seek(io::SeekFrom::Start(skip_to))
                    .await
                    .map_err(io_err)?;
                kept.total += skip_to - read;
                read = skip_to;
            }
            let n = file.read(&mut buf).await.map_err(io_err)?;
            if n == 0 {
                break;
            }
            read += n as u64;
            kept.push(&buf[..n]);
        }
        Ok(ToolOutput::text(kept.into_text()))
    }
}

// ---------------------------------------------------------------------------------------------
// write_file

/// `write_file`'s input.
#[derive(Debug, Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct WriteFileInput {
    /// The file to write, relative to the working directory. Missing folders are created.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// Creates or overwrites a file.
#[derive(Debug, Clone)]
pub struct WriteFile {
    ws: Arc<Workspace>,
}

impl WriteFile {
    /// A `write_file` tool confined to `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        WriteFile { ws }
    }
}

#[async_trait]
impl Tool for WriteFile {
    type Input = WriteFileInput;

    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Creates a file in the working directory, or replaces its whole content. Creates \
         missing parent folders. To change part of a file, use edit_file."
    }

    fn concurrency(&self, input: &WriteFileInput) -> Concurrency {
        self.ws.key(&input.path)
    }

    async fn call(
        &self,
        input: WriteFileInput,
        _ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let path = self.ws.resolve_for_write(&input.path)?;
        let shown = self.ws.display(&path);
        if path.is_dir() {
            return Err(ToolError::new(format!("{shown} is a directory")));
        }
        let existed = path.exists();
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| {
                ToolError::new(format!("cannot create the folders of {shown}: {e}"))
            })?;
        }
        tokio::fs::write(&path, input.content.as_bytes())
            .await
            .map_err(|e| ToolError::new(format!("cannot write {shown}: {e}")))?;
        let verb = if existed { "overwrote" } else { "created" };
        Ok(ToolOutput::text(format!(
            "{verb} {shown} ({} bytes, {} lines)",
            input.content.len(),
            input.content.lines().count()
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// edit_file

/// `edit_file`'s input.
#[derive(Debug, Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct EditFileInput {
    /// The file to edit, relative to the working directory.
    pub path: String,
    /// The exact text to replace, including whitespace and indentation. It must occur
    /// exactly once in the file: add surrounding lines to make it unique.
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
}

/// Replaces one exact occurrence of a string in a file.
#[derive(Debug, Clone)]
pub struct EditFile {
    ws: Arc<Workspace>,
}

impl EditFile {
    /// An `edit_file` tool confined to `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        EditFile { ws }
    }
}

/// Replaces the single occurrence of `old` in `content`; fails when `old` is empty, absent,
/// or occurs more than once (overlapping occurrences count).
pub fn replace_once(content: &str, old: &str, new: &str) -> Result<String, String> {
    if old.is_empty() {
        return Err("old_string is empty; pass the exact text to replace".into());
    }
    let Some(first) = content.find(old) else {
        return Err(
            "old_string was not found; read the file and copy the exact text, including \
             whitespace and indentation"
                .into(),
        );
    };
    let step = content[first..].chars().next().map_or(1, char::len_utf8);
    if content[first + step..].contains(old) {
        let count = content.match_indices(old).count().max(2);
        return Err(format!(
            "old_string occurs {count} times; include more surrounding text so it matches \
             exactly once"
        ));
    }
    let mut out = String::with_capacity(content.len() - old.len() + new.len());
    out.push_str(&content[..first]);
    out.push_str(new);
    out.push_str(&content[first + old.len()..]);
    Ok(out)
}

#[async_trait]
impl Tool for EditFile {
    type Input = EditFileInput;

    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Edits a text file by replacing one exact occurrence of old_string with new_string. \
         Fails if old_string is missing or occurs more than once."
    }

    fn concurrency(&self, input: &EditFileInput) -> Concurrency {
        self.ws.key(&input.path)
    }

    async fn call(&self, input: EditFileInput, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let path = self.ws.resolve_existing(&input.path)?;
        let shown = self.ws.display(&path);
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| ToolError::new(format!("cannot read {shown}: {e}")))?;
        if meta.is_dir() {
            return Err(ToolError::new(format!("{shown} is a directory")));
        }
        if meta.len() > MAX_EDIT_FILE {
            return Err(ToolError::new(format!(
                "{shown} is {} bytes, more than edit_file handles ({MAX_EDIT_FILE}); use bash \
                 (sed, a script) instead",
                meta.len()
            )));
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| ToolError::new(format!("cannot read {shown}: {e}")))?;
        let content = String::from_utf8(bytes)
            .map_err(|_| ToolError::new(format!("{shown} is not UTF-8 text")))?;
        if input.old_string == input.new_string {
            return Err(ToolError::new(
                "old_string and new_string are the same; nothing to change",
            ));
        }
        let edited = replace_once(&content, &input.old_string, &input.new_string)
            .map_err(|e| ToolError::new(format!("cannot edit {shown}: {e}")))?;
        tokio::fs::write(&path, edited.as_bytes())
            .await
            .map_err(|e| ToolError::new(format!("cannot write {shown}: {e}")))?;
        Ok(ToolOutput::text(format!(
            "edited {shown}: replaced {} line(s) with {} line(s)",
            input.old_string.lines().count().max(1),
            input.new_string.lines().count()
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// bash

/// `bash`'s input.
#[derive(Debug, Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
pub struct BashInput {
    /// The command line, run with `bash -c` in the working directory.
    pub command: String,
    /// Seconds before the command is killed (default 30, at most 600).
    #[serde(default)]
    pub timeout_secs: Option<u32>,
}

/// Runs a shell command in the working directory, with a timeout and bounded output.
#[derive(Debug, Clone)]
pub struct Bash {
    ws: Arc<Workspace>,
    timeout: Duration,
    max_timeout: Duration,
    max_output: usize,
}

impl Bash {
    /// A `bash` tool starting commands in `ws`.
    pub fn new(ws: Arc<Workspace>) -> Self {
        Bash {
            ws,
            timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(600),
            max_output: DEFAULT_MAX_OUTPUT,
        }
    }

    /// The timeout when the model does not set one (default 30 s); also caps what it sets.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.max_timeout = self.max_timeout.max(timeout);
        self
    }

    /// The longest timeout the model may ask for (default 600 s).
    pub fn max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout = timeout;
        self.timeout = self.timeout.min(timeout);
        self
    }

    /// The most bytes kept of stdout, and of stderr (default [`DEFAULT_MAX_OUTPUT`]).
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes.max(16);
        self
    }
}

/// Kills the command's whole process group (the shell and everything it started) when
/// dropped: on timeout, on cancellation, and after the shell exits (background leftovers
/// would otherwise keep the output pipes open).
struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.take() {
            // No libc dependency: the `kill` utility signals the group (negative id).
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pgid}")])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[async_trait]
impl Tool for Bash {
    type Input = BashInput;

    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        "Runs a bash command in the working directory and returns its exit code, stdout and \
         stderr (long output is shortened in the middle). Commands are killed after the \
         timeout. Use it to list files, run builds and tests, search with grep."
    }

    fn concurrency(&self, _input: &BashInput) -> Concurrency {
        Concurrency::Exclusive
    }

    fn timeout(&self) -> Option<Duration> {
        // Our own timeout answers first, with the output so far; this is the backstop.
        Some(self.max_timeout + Duration::from_secs(10))
    }

    async fn call(&self, input: BashInput, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        if input.command.trim().is_empty() {
            return Err(ToolError::new("the command is empty"));
        }
        let timeout = match input.timeout_secs {
            Some(secs) => Duration::from_secs(u64::from(secs.max(1))).min(self.max_timeout),
            None => self.timeout,
        };
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(&input.command)
            .current_dir(self.ws.root())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::new(format!("cannot start bash: {e}")))?;
        let mut group = ProcessGroup(child.id());
        let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take())
        else {
            return Err(ToolError::new("cannot capture the command's output"));
        };

        let mut out = HeadTail::new(self.max_output);
        let mut err = HeadTail::new(self.max_output);
        let mut status = None;
        let work = async {
            let (mut out_buf, mut err_buf) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
            let (mut out_open, mut err_open) = (true, true);
            while out_open || err_open || status.is_none() {
                tokio::select! {
                    r = stdout.read(&mut out_buf), if out_open => match r {
                        Ok(n) if n > 0 => out.push(&out_buf[..n]),
                        _ => out_open = false,
                    },
                    r = stderr.read(&mut err_buf), if err_open => match r {
                        Ok(n) if n > 0 => err.push(&err_buf[..n]),
                        _ => err_open = false,
                    },
                    s = child.wait(), if status.is_none() => {
                        status = Some(s);
                        // The shell is done: end whatever it left running in the
                        // background, so the pipes close and reading ends.
                        group.kill();
                    }
                }
            }
        };
        let timed_out = tokio::time::timeout(timeout, work).await.is_err();
        group.kill();
        // `child` is dropped at the end with kill_on_drop, should it still run.

        let mut text = String::new();
        if timed_out {
            text.push_str(&format!(
                "the command timed out after {timeout:?} and was killed\n"
            ));
        } else {
            match status {
                Some(Ok(s)) => match s.code() {
                    Some(code) => text.push_str(&format!("exit code: {code}\n")),
                    None => {
                        text.push_str(&format!("the command was terminated by a signal ({s})\n"))
                    }
                },
                Some(Err(e)) => text.push_str(&format!("cannot wait for the command: {e}\n")),
                None => {}
            }
        }
        let had_err = !err.is_empty();
        if !out.is_empty() {
            text.push_str(&out.into_text());
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        if had_err {
            text.push_str("--- stderr ---\n");
            text.push_str(&err.into_text());
        }
        if timed_out {
            // An error result: the model should know the command did not finish.
            return Err(ToolError::new(text.trim_end().to_owned()));
        }
        Ok(ToolOutput::text(text.trim_end().to_owned()))
    }
}

/// The four tools, confined to `ws`, added to an agent builder.
pub fn add_tools(
    builder: agent_loop::AgentBuilder,
    ws: &Arc<Workspace>,
) -> agent_loop::AgentBuilder {
    builder
        .tool(Bash::new(ws.clone()))
        .tool(ReadFile::new(ws.clone()))
        .tool(WriteFile::new(ws.clone()))
        .tool(EditFile::new(ws.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_tail_keeps_both_ends_and_counts_the_middle() {
        let mut h = HeadTail::new(9);
        for chunk in [&b"abcd"[..], b"efgh", b"ijklmnop", b"qrstuvwxyz"] {
            h.push(chunk);
        }
        assert_eq!(h.total(), 26);
        assert_eq!(h.omitted(), 17);
        let text = h.into_text();
        assert!(text.starts_with("abcdef\n[... 17 bytes omitted"), "{text}");
        assert!(text.ends_with("xyz"), "{text}");
    }

    #[test]
    fn replace_once_refuses_missing_and_ambiguous() {
        assert_eq!(replace_once("a b c", "b", "x").unwrap(), "a x c");
        assert!(replace_once("a b c", "z", "x")
            .unwrap_err()
            .contains("not found"));
        assert!(replace_once("b b", "b", "x")
            .unwrap_err()
            .contains("2 times"));
        assert!(replace_once("aaa", "aa", "x")
            .unwrap_err()
            .contains("times"));
        assert!(replace_once("abc", "", "x").unwrap_err().contains("empty"));
    }
}

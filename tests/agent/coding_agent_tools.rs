//! The coding agent example's tools: path confinement, bash's working directory, timeout and
//! output bound. The tools run through a `ToolRegistry`, as the agent runs them.
#![cfg(unix)]

#[allow(unreachable_pub)]
#[path = "../../examples/coding_agent/tools.rs"]
mod tools;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::tool::{ExecOptions, ToolCall, ToolCallResult};
use agent_loop::ToolRegistry;
use serde_json::{json, Value};
use tools::{Bash, EditFile, ReadFile, Workspace, WriteFile};

/// A unique temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path =
            std::env::temp_dir().join(format!("agent-loop-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sandbox: `work` is the working directory; `outside` sits next to it with a secret.
struct Fixture {
    _tmp: TempDir,
    work: PathBuf,
    outside: PathBuf,
    tools: ToolRegistry,
}

fn fixture(name: &str, bash: impl FnOnce(Bash) -> Bash) -> Fixture {
    let tmp = TempDir::new(name);
    let work = tmp.path().join("work");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    std::fs::write(work.join("hello.txt"), "hello\n").unwrap();
    let ws = Arc::new(Workspace::new(&work).unwrap());
    let tools = ToolRegistry::new()
        .with(bash(Bash::new(ws.clone())))
        .unwrap()
        .with(ReadFile::new(ws.clone()))
        .unwrap()
        .with(WriteFile::new(ws.clone()))
        .unwrap()
        .with(EditFile::new(ws))
        .unwrap();
    Fixture {
        _tmp: tmp,
        work,
        outside,
        tools,
    }
}

impl Fixture {
    async fn call(&self, name: &str, input: Value) -> ToolCallResult {
        self.tools
            .execute_one(ToolCall::new("t1", name, input), &ExecOptions::default())
            .await
    }

    async fn ok(&self, name: &str, input: Value) -> String {
        let r = self.call(name, input.clone()).await;
        assert!(!r.is_error, "{name}({input}) failed: {}", r.content);
        r.content
    }

    async fn refused(&self, name: &str, input: Value) -> String {
        let r = self.call(name, input.clone()).await;
        assert!(r.is_error, "{name}({input}) was not refused: {}", r.content);
        assert!(r.content.contains("refused"), "{}", r.content);
        r.content
    }
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[tokio::test]
async fn files_inside_are_written_read_and_edited() {
    let f = fixture("inside", |b| b);
    let out = f
        .ok(
            "write_file",
            json!({"path": "a/b/new.txt", "content": "one\ntwo\n"}),
        )
        .await;
    assert_eq!(out, "created a/b/new.txt (8 bytes, 2 lines)");
    assert_eq!(
        f.ok("read_file", json!({"path": "a/b/new.txt"})).await,
        "one\ntwo\n"
    );
    // `.` and `..` that stay inside are fine, and so are absolute paths inside.
    assert_eq!(
        f.ok("read_file", json!({"path": "./sub/../a/./b/new.txt"}))
            .await,
        "one\ntwo\n"
    );
    let absolute = f.work.join("hello.txt");
    assert_eq!(
        f.ok("read_file", json!({"path": absolute.to_str().unwrap()}))
            .await,
        "hello\n"
    );
    f.ok(
        "edit_file",
        json!({"path": "a/b/new.txt", "old_string": "two", "new_string": "2"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(f.work.join("a/b/new.txt")).unwrap(),
        "one\n2\n"
    );
    // A symbolic link that stays inside is followed.
    symlink(&f.work.join("hello.txt"), &f.work.join("link.txt"));
    assert_eq!(
        f.ok("read_file", json!({"path": "link.txt"})).await,
        "hello\n"
    );
}

#[tokio::test]
async fn edit_fails_when_the_old_string_is_absent_or_ambiguous() {
    let f = fixture("edit", |b| b);
    std::fs::write(f.work.join("x.txt"), "a = 1\nb = 1\n").unwrap();
    let absent = f
        .call(
            "edit_file",
            json!({"path": "x.txt", "old_string": "c = 1", "new_string": "c = 2"}),
        )
        .await;
    assert!(absent.is_error);
    assert!(absent.content.contains("not found"), "{}", absent.content);
    let ambiguous = f
        .call(
            "edit_file",
            json!({"path": "x.txt", "old_string": "= 1", "new_string": "= 2"}),
        )
        .await;
    assert!(ambiguous.is_error);
    assert!(
        ambiguous.content.contains("occurs 2 times"),
        "{}",
        ambiguous.content
    );
    assert_eq!(
        std::fs::read_to_string(f.work.join("x.txt")).unwrap(),
        "a = 1\nb = 1\n",
        "a failed edit changes nothing"
    );
}

#[tokio::test]
async fn dot_dot_escapes_are_refused() {
    let f = fixture("dotdot", |b| b);
    for path in [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "..",
    ] {
        let msg = f.refused("read_file", json!({"path": path})).await;
        assert!(msg.contains("outside the working directory"), "{msg}");
    }
    f.refused(
        "write_file",
        json!({"path": "../outside/new.txt", "content": "x"}),
    )
    .await;
    f.refused(
        "edit_file",
        json!({"path": "../outside/secret.txt", "old_string": "top", "new_string": "no"}),
    )
    .await;
    assert!(!f.outside.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
}

#[tokio::test]
async fn absolute_paths_outside_are_refused() {
    let f = fixture("absolute", |b| b);
    let secret = f.outside.join("secret.txt");
    let msg = f
        .refused("read_file", json!({"path": secret.to_str().unwrap()}))
        .await;
    assert!(msg.contains("outside the working directory"), "{msg}");
    f.refused("read_file", json!({"path": "/etc/passwd"})).await;
    let target = f.outside.join("planted.txt");
    f.refused(
        "write_file",
        json!({"path": target.to_str().unwrap(), "content": "x"}),
    )
    .await;
    assert!(!target.exists());
    // An absolute path that climbs out of the working directory with `..`.
    let sneaky = format!("{}/../outside/secret.txt", f.work.display());
    f.refused("read_file", json!({"path": sneaky})).await;
}

#[tokio::test]
async fn symlinks_pointing_out_are_refused() {
    let f = fixture("symlink", |b| b);
    symlink(&f.outside.join("secret.txt"), &f.work.join("leak.txt"));
    let msg = f.refused("read_file", json!({"path": "leak.txt"})).await;
    assert!(msg.contains("symbolic link"), "{msg}");
    f.refused(
        "write_file",
        json!({"path": "leak.txt", "content": "pwned"}),
    )
    .await;
    f.refused(
        "edit_file",
        json!({"path": "leak.txt", "old_string": "top", "new_string": "no"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    // A dangling link pointing out: writing through it would create the target.
    symlink(&f.outside.join("created.txt"), &f.work.join("dangling.txt"));
    f.refused(
        "write_file",
        json!({"path": "dangling.txt", "content": "x"}),
    )
    .await;
    f.refused("read_file", json!({"path": "dangling.txt"}))
        .await;
    assert!(!f.outside.join("created.txt").exists());
}

#[tokio::test]
async fn symlinked_parent_folders_are_refused() {
    let f = fixture("parent", |b| b);
    symlink(&f.outside, &f.work.join("door"));
    let msg = f
        .refused("read_file", json!({"path": "door/secret.txt"}))
        .await;
    assert!(msg.contains("symbolic link"), "{msg}");
    // Writing a new file below the linked folder: the nearest existing ancestor resolves out.
    f.refused(
        "write_file",
        json!({"path": "door/new.txt", "content": "x"}),
    )
    .await;
    f.refused(
        "write_file",
        json!({"path": "door/deeper/still/new.txt", "content": "x"}),
    )
    .await;
    assert!(!f.outside.join("new.txt").exists());
    assert!(!f.outside.join("deeper").exists());
    // A link to a folder inside is fine.
    symlink(&f.work.join("sub"), &f.work.join("alias"));
    f.ok(
        "write_file",
        json!({"path": "alias/ok.txt", "content": "fine"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(f.work.join("sub/ok.txt")).unwrap(),
        "fine"
    );
}

#[tokio::test]
async fn bash_runs_in_the_working_directory() {
    let f = fixture("bash-cwd", |b| b);
    let out = f.ok("bash", json!({"command": "pwd && ls"})).await;
    let root = std::fs::canonicalize(&f.work).unwrap();
    assert!(out.starts_with("exit code: 0\n"), "{out}");
    assert!(out.contains(&format!("{}\n", root.display())), "{out}");
    assert!(out.contains("hello.txt"), "{out}");
    let failing = f
        .ok("bash", json!({"command": "echo oops >&2; exit 3"}))
        .await;
    assert_eq!(failing, "exit code: 3\n--- stderr ---\noops");
}

#[tokio::test]
async fn bash_times_out() {
    // Real time, but only as an upper bound: the command would take 5 s; the timeout is 300 ms.
    let f = fixture("bash-timeout", |b| b.timeout(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    let r = f
        .call(
            "bash",
            json!({"command": "echo started; sleep 5; echo never"}),
        )
        .await;
    assert!(r.is_error);
    assert!(r.content.contains("timed out"), "{}", r.content);
    assert!(
        r.content.contains("started"),
        "the output so far is kept: {}",
        r.content
    );
    assert!(!r.content.contains("never"));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the command was not killed"
    );
}

#[tokio::test]
async fn bash_output_is_bounded() {
    let f = fixture("bash-bounded", |b| b.max_output(4096));
    let out = f
        .ok("bash", json!({"command": "yes | head -c 10000000"}))
        .await;
    assert!(
        out.contains("bytes omitted"),
        "{}",
        &out[..200.min(out.len())]
    );
    assert!(out.len() < 5000, "{} bytes", out.len());
    assert!(out.starts_with("exit code: 0\ny\ny\n"));
    assert!(out.ends_with("y\ny"));
    // 10_000_000 bytes seen, 4096 kept.
    assert!(out.contains("[... 9995904 bytes omitted"), "{out}");
}

#[tokio::test]
async fn read_file_output_is_bounded() {
    let tmp = TempDir::new("read-bounded");
    let ws = Arc::new(Workspace::new(tmp.path()).unwrap());
    let big: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(tmp.path().join("big.txt"), &big).unwrap();
    let tools = ToolRegistry::new()
        .with(ReadFile::new(ws).max_output(3000))
        .unwrap();
    let r = tools
        .execute_one(
            ToolCall::new("t", "read_file", json!({"path": "big.txt"})),
            &ExecOptions::default(),
        )
        .await;
    assert!(!r.is_error, "{}", r.content);
    assert!(r.content.starts_with("line 0\nline 1\n"));
    assert!(r.content.ends_with("line 199999\n"));
    let omitted = big.len() - 3000;
    assert!(
        r.content.contains(&format!("[... {omitted} bytes omitted")),
        "{}",
        r.content
    );
}

#[test]
fn tool_settings_follow_the_brief() {
    use agent_loop::tool::Concurrency;
    use agent_loop::Tool;
    let tmp = TempDir::new("settings");
    let ws = Arc::new(Workspace::new(tmp.path()).unwrap());
    let bash = Bash::new(ws.clone());
    let input: tools::BashInput = serde_json::from_value(json!({"command": "ls"})).unwrap();
    assert_eq!(bash.concurrency(&input), Concurrency::Exclusive);
    let read = ReadFile::new(ws.clone());
    assert!(read.read_only());
    let input: tools::ReadFileInput = serde_json::from_value(json!({"path": "a.txt"})).unwrap();
    let key = read.concurrency(&input);
    assert!(
        matches!(&key, Concurrency::Keyed(k) if k.ends_with("a.txt")),
        "{key:?}"
    );
    let write = WriteFile::new(ws.clone());
    assert!(!write.read_only());
    let input: tools::WriteFileInput =
        serde_json::from_value(json!({"path": "./a.txt", "content": ""})).unwrap();
    assert_eq!(
        write.concurrency(&input),
        key,
        "the same file, the same key"
    );
    let edit = EditFile::new(ws);
    let input: tools::EditFileInput = serde_json::from_value(
        json!({"path": "sub/../a.txt", "old_string": "x", "new_string": "y"}),
    )
    .unwrap();
    assert_eq!(edit.concurrency(&input), key);
}

#[tokio::test]
async fn bash_returns_when_the_shell_exits_even_with_background_jobs() {
    // A background job keeps the output pipe open; the call must not wait for it (it is
    // killed with the command's process group). Real time only as an upper bound.
    let f = fixture("bash-background", |b| b.timeout(Duration::from_secs(20)));
    let started = std::time::Instant::now();
    let out = f
        .ok("bash", json!({"command": "sleep 30 & echo started"}))
        .await;
    assert_eq!(out, "exit code: 0\nstarted");
    assert!(started.elapsed() < Duration::from_secs(10));
}

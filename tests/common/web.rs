//! Whether the tests that start Node.js peers from node_modules can run here.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Why the Node.js tests cannot run here (`node` or the pinned packages missing), if they
/// cannot. `package` is a path under node_modules/ the script needs.
fn node_problem(package: &str) -> Option<String> {
    // The packages are the workspace's: in this crate's folder for the core, in the folder
    // above for a satellite crate that includes these helpers.
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = [crate_dir.clone(), crate_dir.join("..")]
        .into_iter()
        .find(|dir| dir.join("node_modules").is_dir())
        .unwrap_or(crate_dir);
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !node {
        return Some("`node` is not on PATH".to_owned());
    }
    let path = root.join("node_modules").join(package);
    if !path.exists() {
        return Some(format!("{} is missing (run `npm ci`)", path.display()));
    }
    None
}

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. (Its own copy: agent-loop-ui includes
/// this file alone.)
fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

/// Whether the Node.js test `what` can run; under CI a missing `node` or package fails the
/// test, elsewhere it says loudly on stderr what it skips and why.
pub fn node_available(what: &str, package: &str) -> bool {
    let Some(problem) = node_problem(package) else {
        return true;
    };
    if std::env::var_os("CI").is_some() {
        panic!("{what} needs node and the pinned npm packages under CI: {problem}");
    }
    say_skipped(&format!(
        "!!! SKIPPED {what}: {problem}. Install Node.js and run `npm ci` in the repository \
         root to run it."
    ));
    false
}

//! Agent Skills: SKILL.md folders loaded, their catalog in the system prompt, `load_skill` and
//! `read_skill_file` through an agent run, malformed skills named, and every way out of a
//! skill's folder refused (a property test over generated paths).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::tool::{SkillError, Skills};
use agent_loop::{Agent, AgentEvent};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::json;

/// A scratch directory of its own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "agent-loop-skills-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SECRET: &str = "SECRET-OUTSIDE-THE-SKILL";

/// Two skills (one with bundled files and symlinks in and out), a folder without SKILL.md, a
/// stray file, and a secret beside the skills directory.
fn library() -> Scratch {
    let scratch = Scratch::new();
    scratch.write("secret.txt", SECRET);
    scratch.write(
        "skills/pdf-tools/SKILL.md",
        "---\nname: pdf-tools\ndescription: Extracts text from PDF files. Use when the user \
         mentions PDFs.\nlicense: MIT\n---\n# PDF tools\n\nRun `pdftotext`, then read \
         references/guide.md.\n",
    );
    scratch.write("skills/pdf-tools/references/guide.md", "The guide.");
    scratch.write("skills/pdf-tools/scripts/run.sh", "pdftotext \"$1\" -");
    scratch.write(
        "skills/release-notes/SKILL.md",
        "---\nname: release-notes\ndescription: >\n  Writes release notes from a list of\n  \
         changes.\n---\nGroup the changes.\n",
    );
    scratch.write("skills/not-a-skill/readme.txt", "no SKILL.md here");
    scratch.write("skills/stray.md", "not a folder");
    #[cfg(unix)]
    {
        let skill = scratch.0.join("skills/pdf-tools");
        std::os::unix::fs::symlink(scratch.0.join("secret.txt"), skill.join("link-out")).unwrap();
        std::os::unix::fs::symlink(scratch.0.join("skills"), skill.join("dir-out")).unwrap();
        std::os::unix::fs::symlink(skill.join("references/guide.md"), skill.join("link-in"))
            .unwrap();
    }
    scratch
}

fn skills_dir(scratch: &Scratch) -> PathBuf {
    scratch.0.join("skills")
}

#[test]
fn skill_folders_load_in_name_order_with_their_catalog() {
    let scratch = library();
    let skills = Skills::load(skills_dir(&scratch)).unwrap();
    let names: Vec<&str> = skills.skills().iter().map(|s| s.name()).collect();
    assert_eq!(names, ["pdf-tools", "release-notes"]);
    let notes = skills.get("release-notes").unwrap();
    assert_eq!(
        notes.description(),
        "Writes release notes from a list of changes."
    );
    assert_eq!(notes.instructions(), "Group the changes.");
    assert_eq!(skills.get("pdf-tools").unwrap().license(), Some("MIT"));
    let prompt = skills.system_prompt("You are terse.");
    assert!(prompt.starts_with("You are terse.\n\n"), "{prompt}");
    assert!(prompt.contains(
        "<name>pdf-tools</name>\n<description>Extracts text from PDF files. Use when the user \
         mentions PDFs.</description>"
    ));
    assert!(prompt.contains("<name>release-notes</name>"));
    // The instructions themselves are not in the prompt: they load on demand.
    assert!(!prompt.contains("Group the changes."));
    let files = skills.get("pdf-tools").unwrap().files();
    #[cfg(unix)]
    assert_eq!(files, ["link-in", "references/guide.md", "scripts/run.sh"]);
    #[cfg(not(unix))]
    assert_eq!(files, ["references/guide.md", "scripts/run.sh"]);
}

#[test]
fn a_malformed_skill_is_an_error_naming_its_file_and_line() {
    let scratch = library();
    scratch.write(
        "skills/broken/SKILL.md",
        "---\nname: broken\ndescription: [not, a, string]\n---\n",
    );
    let error = Skills::load(skills_dir(&scratch)).unwrap_err();
    let SkillError::Malformed { path, line, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(path.ends_with("broken/SKILL.md"), "{path:?}");
    assert_eq!(*line, 3);
    let text = error.to_string();
    assert!(text.contains("broken/SKILL.md:3:"), "{text}");
    assert!(text.contains("flow collection"), "{text}");
    // As the crate's error (through `?` in a builder function), the file is still named.
    let error: agent_loop::Error = error.into();
    assert!(error.to_string().contains("broken/SKILL.md"), "{error}");

    let scratch = library();
    scratch.write(
        "skills/misnamed/SKILL.md",
        "---\nname: other-name\ndescription: d\n---\n",
    );
    let error = Skills::load(skills_dir(&scratch)).unwrap_err().to_string();
    assert!(error.contains("misnamed/SKILL.md:2:"), "{error}");
    assert!(error.contains("folder name"), "{error}");
}

async fn read(scratch: &Scratch, path: &str) -> Result<String, String> {
    let skills = Skills::load(skills_dir(scratch)).unwrap();
    skills.get("pdf-tools").unwrap().read_file(path).await
}

#[tokio::test]
async fn bundled_files_read_inside_the_folder_only() {
    let scratch = library();
    assert_eq!(
        read(&scratch, "references/guide.md").await.unwrap(),
        "The guide."
    );
    // As documented: `.` and a doubled `/` change nothing.
    for path in [
        "./references/guide.md",
        "references//guide.md",
        "references/./guide.md",
    ] {
        assert_eq!(read(&scratch, path).await.unwrap(), "The guide.", "{path}");
    }
    for (path, words) in [
        ("../release-notes/SKILL.md", "'..' is not allowed"),
        ("references/../../secret.txt", "'..' is not allowed"),
        ("../../secret.txt", "'..' is not allowed"),
        ("/etc/passwd", "absolute paths are not allowed"),
        ("", "empty"),
        ("references", "not a file"),
        ("missing.md", "no such file"),
    ] {
        let error = read(&scratch, path).await.unwrap_err();
        assert!(error.contains(words), "{path:?}: {error}");
    }
    let secret = scratch.0.join("secret.txt");
    let error = read(&scratch, secret.to_str().unwrap()).await.unwrap_err();
    assert!(error.contains("absolute"), "{error}");
    #[cfg(unix)]
    {
        assert_eq!(read(&scratch, "link-in").await.unwrap(), "The guide.");
        for path in ["link-out", "dir-out/release-notes/SKILL.md"] {
            let error = read(&scratch, path).await.unwrap_err();
            assert!(
                error.contains("outside the skill's folder"),
                "{path}: {error}"
            );
        }
    }
    // Bounded: a file over the limit is refused, not read.
    scratch.write(
        "skills/pdf-tools/big.txt",
        &"x".repeat(agent_loop::tool::skills::MAX_FILE_BYTES as usize + 1),
    );
    assert!(read(&scratch, "big.txt")
        .await
        .unwrap_err()
        .contains("larger than"));
    std::fs::write(
        scratch.0.join("skills/pdf-tools/blob.bin"),
        [0xff, 0xfe, 0x00],
    )
    .unwrap();
    assert!(read(&scratch, "blob.bin")
        .await
        .unwrap_err()
        .contains("not UTF-8"));
}

#[tokio::test]
async fn an_agent_loads_a_skill_and_reads_its_file_on_demand() {
    let scratch = library();
    let skills = Skills::load(skills_dir(&scratch)).unwrap();
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "load_skill", json!({"name": "pdf-tools"})),
        ScriptedResponse::tool_call(
            "c2",
            "read_skill_file",
            json!({"skill": "pdf-tools", "path": "references/guide.md"}),
        )
        .then_tool_call(
            "c3",
            "read_skill_file",
            json!({"skill": "pdf-tools", "path": "../../secret.txt"}),
        ),
        ScriptedResponse::text("Done."),
    ]);
    let mut agent = Agent::builder(client.clone())
        .system(skills.system_prompt("You are terse."))
        .tool_source(skills)
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent.run("Summarise a.pdf").collect().await;
    let results: Vec<(String, String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult {
                id,
                content,
                is_error,
                ..
            } => Some((id.clone(), content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    let (_, instructions, failed) = &results[0];
    assert!(!failed);
    assert!(instructions.starts_with("# PDF tools"), "{instructions}");
    assert!(
        instructions.contains("references/guide.md\nscripts/run.sh"),
        "{instructions}"
    );
    let by_id = |id: &str| results.iter().find(|r| r.0 == id).unwrap();
    assert_eq!(by_id("c2").1, "The guide.");
    assert!(!by_id("c2").2);
    assert!(by_id("c3").2, "{:?}", by_id("c3"));
    assert!(!by_id("c3").1.contains(SECRET));

    let request = &client.requests()[0];
    let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["load_skill", "read_skill_file"]);
    assert!(request
        .system
        .as_deref()
        .unwrap()
        .contains("<name>release-notes</name>"));
}

/// Path steps a model might try, joined with `/` (and an optional leading `/`).
fn arb_path() -> impl Strategy<Value = String> {
    let step = prop::sample::select(vec![
        "..",
        ".",
        "references",
        "guide.md",
        "SKILL.md",
        "link-out",
        "link-in",
        "dir-out",
        "release-notes",
        "secret.txt",
        "skills",
        "",
        "pdf-tools",
        "%2e%2e",
        "...",
    ]);
    (any::<bool>(), prop::collection::vec(step, 1..6)).prop_map(|(root, steps)| {
        let joined = steps.join("/");
        if root {
            format!("/{joined}")
        } else {
            joined
        }
    })
}

fn inside(root: &Path, relative: &str) -> bool {
    !relative.starts_with('/')
        && !relative.split('/').any(|s| s == "..")
        && root
            .join(relative)
            .canonicalize()
            .is_ok_and(|p| p.starts_with(root.canonicalize().unwrap()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// Whatever the path, a read either returns a file inside the skill's folder (the path
    /// relative, without `..`, resolving inside) or refuses; the secret beside the skills
    /// never comes back.
    #[test]
    fn no_path_leaves_the_skills_folder(paths in prop::collection::vec(arb_path(), 1..16)) {
        let scratch = library();
        let skills = Skills::load(skills_dir(&scratch)).unwrap();
        let skill = skills.get("pdf-tools").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for path in paths {
            let result = runtime.block_on(skill.read_file(&path));
            if let Ok(text) = &result {
                prop_assert!(!text.contains(SECRET), "{path}");
                prop_assert!(inside(skill.dir(), &path), "{path} read from outside");
            }
        }
    }
}

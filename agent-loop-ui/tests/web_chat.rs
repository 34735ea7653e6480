//! The web_chat example (examples/web_chat/) in a real browser: headless Chromium from
//! Debian's `chromium` package, driven by playwright-core (tests/js/web-chat-browser.mjs)
//! against the example's own server and page on a loopback port, with its scripted model.
//!
//! Under CI (`CI` set) a missing browser, `node` or npm package fails the test; elsewhere the
//! test says on stderr what it skipped and why. `AGENT_LOOP_SCREENSHOT=path.png` saves a
//! screenshot of the page waiting for approval (docs/web_chat.png, shown in
//! docs/guide/web-front-ends.md).
#![allow(clippy::duplicate_mod)]

mod common;

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/web_chat/main.rs"]
mod web_chat;

use serde_json::Value;

/// The system Chromium (`CHROMIUM`, else Debian's /usr/bin/chromium), or `None` (after saying
/// so) when the test must be skipped.
fn chromium() -> Option<String> {
    let path = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!("the browser test needs Chromium under CI: {path} is missing (apt-get install chromium)");
    }
    say_skipped(&format!(
        "!!! SKIPPED the web chat browser test: {path} is missing. Install Debian's chromium \
         (apt-get install chromium), or set CHROMIUM to a Chromium binary, to run it."
    ));
    None
}

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. Under CI the test fails instead.
fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_streams_a_run_shows_its_tool_calls_and_finishes_it_once_approved() {
    let Some(chromium) = chromium() else { return };
    if !common::web::node_available("the web chat browser test", "playwright-core") {
        return;
    }
    let (app, mock, _) = web_chat::scripted_app().await;
    let url = common::web::serve(web_chat::router(app)).await;
    let mut args = vec![url.as_str(), chromium.as_str(), "approve"];
    let screenshot = std::env::var("AGENT_LOOP_SCREENSHOT").ok();
    if let Some(path) = &screenshot {
        args.push(path);
    }
    let seen = common::web::node_json("web-chat-browser.mjs", &args).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen:#}");
    assert_eq!(seen["title"], "agent-loop web chat");

    // Before the verdict: the question, then one assistant message with the reasoning, the
    // streamed text, the listing (run, read-only) and the deletion waiting with its buttons.
    let before = &seen["beforeApproval"];
    assert_eq!(before["status"], "waiting for approval", "{before:#}");
    let messages = before["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{before:#}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(strings(&messages[0]["texts"]), ["Please tidy up the logs."]);
    let answer = &messages[1];
    assert_eq!(answer["role"], "assistant");
    assert!(
        strings(&answer["reasoning"])
            .concat()
            .contains("list the folder before deleting"),
        "{answer:#}"
    );
    // Rendered from Markdown: the backticks are code spans.
    assert_eq!(
        strings(&answer["texts"]),
        [
            "Let me look at the logs folder first.",
            "old.log is 92 days old and takes 48 MB; I'll delete it and keep today.log."
        ],
        "{answer:#}"
    );
    let tools = answer["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 2, "{answer:#}");
    assert_eq!(tools[0]["name"], "list_files");
    assert_eq!(tools[0]["state"], "output-available");
    assert_eq!(tools[0]["args"], r#"{"dir":"logs"}"#);
    assert!(tools[0]["output"]
        .as_str()
        .is_some_and(|o| o.contains("logs/old.log (92 days old, 48 MB)")));
    assert_eq!(tools[1]["name"], "delete_file");
    assert_eq!(tools[1]["state"], "approval-requested");
    assert_eq!(tools[1]["label"], "waiting for approval");
    assert_eq!(tools[0]["label"], "done");
    assert_eq!(tools[1]["args"], r#"{"path":"logs/old.log"}"#);
    assert_eq!(
        tools[1]["output"],
        Value::Null,
        "nothing ran before the verdict"
    );
    assert_eq!(strings(&tools[1]["buttons"]), ["Approve", "Deny"]);

    // The text and the call's arguments reached the page in pieces, not at once.
    let texts = strings(&seen["seen"]["text"]);
    assert!(
        texts.len() >= 2 && texts.last().is_some_and(|t| t.contains("logs folder")),
        "the answer's text did not stream: {texts:?}"
    );
    let partial_args = strings(&seen["seen"]["args"]["delete_file"]);
    assert!(
        partial_args.len() >= 2,
        "the call's arguments did not stream: {partial_args:?}"
    );

    // After Approve: the same assistant message goes on; the deletion ran once, and the
    // final answer came.
    let after = &seen["afterApproval"];
    assert_eq!(after["status"], "done", "{after:#}");
    let messages = after["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{after:#}");
    let answer = &messages[1];
    let tools = answer["tools"].as_array().expect("tools");
    assert_eq!(tools[1]["name"], "delete_file");
    assert_eq!(tools[1]["state"], "output-available", "{answer:#}");
    assert_eq!(tools[1]["output"], "deleted logs/old.log");
    assert_eq!(strings(&tools[1]["buttons"]), Vec::<String>::new());
    assert_eq!(
        strings(&answer["texts"]).last().map(String::as_str),
        Some("Done: logs/old.log is deleted, 48 MB freed. today.log stays.")
    );
    assert_eq!(strings(&answer["errors"]), Vec::<String>::new());
    // Three model calls: the listing, the deletion, the answer; none twice.
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_does_not_run_and_the_model_reads_the_denial() {
    let Some(chromium) = chromium() else { return };
    if !common::web::node_available("the web chat browser test", "playwright-core") {
        return;
    }
    let (app, mock, _) = web_chat::scripted_app().await;
    let url = common::web::serve(web_chat::router(app)).await;
    let seen = common::web::node_json("web-chat-browser.mjs", &[&url, &chromium, "deny"]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen:#}");
    let after = &seen["afterApproval"];
    assert_eq!(after["status"], "done", "{after:#}");
    let answer = &after["messages"][1];
    let tools = answer["tools"].as_array().expect("tools");
    assert_eq!(tools[1]["name"], "delete_file");
    assert_eq!(tools[1]["state"], "output-denied", "{answer:#}");
    assert_eq!(tools[1]["output"], "denied: Denied in the web chat.");
    assert_eq!(tools[1]["label"], "denied");
    assert_eq!(
        strings(&answer["texts"]).last().map(String::as_str),
        Some("Understood: I left old.log where it is. Nothing was deleted.")
    );
    // The model read the person's reason as the call's error result.
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let last = requests[2].body.to_string();
    assert!(last.contains("Denied in the web chat."), "{last}");
}

/// Starts the example's server with its scripted model and runs `scenario` in the browser;
/// `None` when the test is skipped.
async fn browse(scenario: &str) -> Option<(Value, web_chat::ModelStreams)> {
    let chromium = chromium()?;
    if !common::web::node_available("the web chat browser test", "playwright-core") {
        return None;
    }
    let (app, mock, streams) = web_chat::scripted_app().await;
    let url = common::web::serve(web_chat::router(app)).await;
    let seen = common::web::node_json("web-chat-browser.mjs", &[&url, &chromium, scenario]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen:#}");
    assert_eq!(
        mock.history_violations(),
        Vec::<String>::new(),
        "the model was sent an invalid history"
    );
    Some((seen, streams))
}

fn tool<'a>(message: &'a Value, name: &str) -> &'a Value {
    message["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {message:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_instead_of_approving_denies_the_call_and_the_chat_goes_on() {
    let Some((seen, _)) = browse("type-instead").await else {
        return;
    };
    let before = &seen["beforeTyping"];
    assert_eq!(before["status"], "waiting for approval", "{before:#}");

    // The new message was taken: the waiting call is shown denied, and the model answered.
    let after = &seen["afterTyping"];
    assert_eq!(after["status"], "done", "{after:#}");
    assert_eq!(after["notice"], Value::Null, "{after:#}");
    let messages = after["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4, "{after:#}");
    assert_eq!(
        strings(&messages[2]["texts"]),
        ["Actually, keep everything."]
    );
    let call = tool(&messages[1], "delete_file");
    assert_eq!(call["state"], "output-denied", "{after:#}");
    assert_eq!(call["label"], "denied");
    assert_eq!(
        call["output"],
        "denied: Not run: the user sent a new message instead of answering this call."
    );
    assert_eq!(strings(&call["buttons"]), Vec::<String>::new());
    assert_eq!(
        strings(&messages[3]["texts"]),
        ["Understood: I left old.log where it is. Nothing was deleted."]
    );

    // Nothing wedged: a second tidy-up paused, was approved and finished.
    let approved = &seen["afterApproval"];
    assert_eq!(approved["status"], "done", "{approved:#}");
    let messages = approved["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 6, "{approved:#}");
    let call = tool(&messages[5], "delete_file");
    assert_eq!(call["state"], "output-available", "{approved:#}");
    assert_eq!(call["output"], "deleted logs/old.log");
    assert_eq!(
        strings(&messages[5]["texts"]).last().map(String::as_str),
        Some("Done: logs/old.log is deleted, 48 MB freed. today.log stays.")
    );

    // A reload shows the same conversation (from the server's session).
    let reloaded = &seen["afterReload"];
    assert_eq!(reloaded["status"], "done", "{reloaded:#}");
    assert_eq!(reloaded["messages"], approved["messages"], "{reloaded:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_renders_markdown_and_shows_html_as_text() {
    let Some((seen, _)) = browse("markdown").await else {
        return;
    };
    let html = &seen["html"];
    assert_eq!(
        strings(&html["strong"]),
        ["tidy up the logs", "bold"],
        "{html:#}"
    );
    assert_eq!(strings(&html["em"]), ["scripted"], "{html:#}");
    assert_eq!(strings(&html["code"]), ["long story"], "{html:#}");
    assert_eq!(html["images"], 0, "{html:#}");
    assert_eq!(html["scripts"], 0, "{html:#}");
    assert_eq!(html["xss"], Value::Null, "{html:#}");
    assert_eq!(
        html["links"],
        serde_json::json!([{"text": "home", "href": "https://example.org/"}]),
        "only an http(s) link is a link: {html:#}"
    );
    assert_eq!(
        html["echoed"],
        r#"You wrote: bold <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> [a link](javascript:window.__xss=3) home"#
    );
    // The user's own message is shown as typed.
    let messages = seen["after"]["messages"].as_array().expect("messages");
    assert!(strings(&messages[2]["texts"])[0].starts_with("echo **bold** <img"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_button_cancels_the_run() {
    let Some((seen, mut streams)) = browse("stop").await else {
        return;
    };
    assert_eq!(seen["stopShown"], true, "{seen:#}");
    assert_eq!(seen["stopHidden"], true, "{seen:#}");
    let stopped = &seen["afterStop"];
    assert_eq!(stopped["status"], "stopped", "{stopped:#}");
    let story = &stopped["messages"][1];
    assert!(
        strings(&story["texts"]).concat().contains("grew and grew"),
        "{story:#}"
    );
    assert_eq!(strings(&story["notes"]), ["Stopped."]);
    let next = &seen["afterNext"];
    assert_eq!(next["status"], "done", "{next:#}");
    assert_eq!(
        next["messages"].as_array().map(Vec::len),
        Some(4),
        "{next:#}"
    );
    // The stopped run was cancelled: its model response (which never ends by itself) was
    // dropped. The wait is on that condition; the timeout only bounds a failure.
    let cancelled = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        streams.wait_for(|open| *open == 0),
    )
    .await
    .is_ok_and(|seen| seen.is_ok());
    assert!(
        cancelled,
        "the stopped run is still streaming from the model: {} response(s) open",
        *streams.borrow()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_said_in_words_and_the_chat_goes_on() {
    let Some((seen, _)) = browse("refused").await else {
        return;
    };
    let refused = &seen["afterRefusal"];
    assert_eq!(
        refused["notice"],
        "The server did not take that: the last message must be a user message: no run waits for answers",
        "{refused:#}"
    );
    assert_eq!(refused["messages"], serde_json::json!([]), "{refused:#}");
    assert_eq!(seen["inputAfterRefusal"], "hello", "the text is given back");
    let retried = &seen["afterRetry"];
    assert_eq!(retried["status"], "done", "{retried:#}");
    assert_eq!(retried["notice"], Value::Null, "{retried:#}");
    assert_eq!(retried["messages"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn the_server_serves_the_page_and_refuses_a_bad_body_with_a_400() {
    let (app, _mock, _) = web_chat::scripted_app().await;
    let url = common::web::serve(web_chat::router(app)).await;
    let http = reqwest_client();
    let page = http.get(&url).send().await.expect("GET /");
    assert_eq!(page.status(), 200);
    assert!(page
        .text()
        .await
        .expect("the page")
        .contains("<title>agent-loop web chat</title>"));
    for path in ["/api/chat", "/agui"] {
        let refused = http
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .expect("POST");
        assert_eq!(refused.status(), 400, "{path}");
        let body: Value = refused.json().await.expect("a JSON error");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}"
        );
    }
}

fn reqwest_client() -> agent_loop::provider::reqwest::Client {
    agent_loop::provider::reqwest::Client::new()
}

/// The example's router, with what the reconnect scenario needs around it: every event
/// stream it sends can be cut mid-way (`POST /test/cut`: the response's body fails, as a
/// dropped connection does), and the scripted model's counting answer, held after its first
/// words, goes on at `POST /test/open`.
fn cuttable(app: web_chat::App) -> axum::Router {
    use futures::StreamExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let gate = app.gate();
    gate.send_replace(false);
    let cut = Arc::new(tokio::sync::watch::channel(0u64).0);
    let cutter = cut.clone();
    web_chat::router(app)
        .layer(axum::middleware::map_response(
            move |response: axum::response::Response| {
                let mut signal = cut.subscribe();
                async move {
                    let streaming = response
                        .headers()
                        .get("content-type")
                        .is_some_and(|v| v == "text/event-stream");
                    if !streaming {
                        return response;
                    }
                    signal.borrow_and_update();
                    let was_cut = Arc::new(AtomicBool::new(false));
                    let flag = was_cut.clone();
                    let (parts, body) = response.into_parts();
                    let body = body
                        .into_data_stream()
                        .map(|item| item.map_err(std::io::Error::other))
                        .take_until(async move {
                            let _ = signal.changed().await;
                            flag.store(true, Ordering::SeqCst);
                        })
                        .chain(
                            futures::stream::once(async move {
                                was_cut
                                    .load(Ordering::SeqCst)
                                    .then(|| Err(std::io::Error::other("cut by the test")))
                            })
                            .filter_map(std::future::ready),
                        );
                    axum::response::Response::from_parts(parts, axum::body::Body::from_stream(body))
                }
            },
        ))
        .route(
            "/test/cut",
            axum::routing::post(move || {
                cutter.send_modify(|n| *n += 1);
                async {}
            }),
        )
        .route(
            "/test/open",
            axum::routing::post(move || {
                gate.send_replace(true);
                async {}
            }),
        )
}

/// Ids 1 to n, once each and in order.
fn consecutive(ids: &Value) -> usize {
    let ids: Vec<u64> = ids
        .as_array()
        .expect("ids")
        .iter()
        .map(|v| v.as_u64().expect("a numeric id"))
        .collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "each event once, in order"
    );
    ids.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_and_a_reload_mid_answer_lose_and_repeat_nothing() {
    let Some(chromium) = chromium() else { return };
    if !common::web::node_available("the web chat browser test", "playwright-core") {
        return;
    }
    let (app, mock, _) = web_chat::scripted_app().await;
    let url = common::web::serve(cuttable(app)).await;
    let seen =
        common::web::node_json("web-chat-browser.mjs", &[&url, &chromium, "reconnect"]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen:#}");
    let answer = |snapshot: &Value| strings(&snapshot["messages"][1]["texts"]).concat();

    // Cut after the first words: the page took the stream up again, every event once.
    assert_eq!(answer(&seen["beforeCut"]), web_chat::COUNT_FIRST);
    assert!(
        seen["cutsLogged"].as_u64() >= Some(1),
        "the stream was cut: {seen:#}"
    );
    let before = consecutive(&seen["idsBeforeReload"]);
    assert!(before > 0);

    // Reloaded mid-answer: the new page has the question and the first words, once.
    let reloaded = &seen["afterReload"];
    assert_eq!(reloaded["status"], "running", "{reloaded:#}");
    assert_eq!(
        strings(&reloaded["messages"][0]["texts"]),
        ["Count to ten, please."]
    );
    assert_eq!(answer(reloaded), web_chat::COUNT_FIRST, "{reloaded:#}");

    // The answer continued to its end, each event once; one model call, one run.
    let done = &seen["afterRest"];
    assert_eq!(done["status"], "done", "{done:#}");
    assert_eq!(done["messages"].as_array().map(Vec::len), Some(2));
    let whole = format!(
        "{}{} Done counting.",
        web_chat::COUNT_FIRST,
        web_chat::COUNT_REST
    );
    assert_eq!(answer(done), whole, "{done:#}");
    assert!(consecutive(&seen["idsAfterReload"]) > before);
    assert_eq!(mock.requests().len(), 1);

    // The server's session holds the same answer.
    let stored = &seen["afterSecondReload"];
    assert_eq!(stored["status"], "done", "{stored:#}");
    assert_eq!(answer(stored), whole, "{stored:#}");
}

/// Written while the answer streams, the words steer the run (`RunStreams::steer` behind the
/// example's `POST /api/chat/{id}/steer`): the page shows them where the run heard them, the
/// run goes on to answer them, and the server's session holds them as the user's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn words_written_while_the_answer_streams_steer_the_run() {
    let Some(chromium) = chromium() else { return };
    if !common::web::node_available("the web chat browser test", "playwright-core") {
        return;
    }
    let (app, mock, _) = web_chat::scripted_app().await;
    let url = common::web::serve(cuttable(app)).await;
    let seen = common::web::node_json("web-chat-browser.mjs", &[&url, &chromium, "steer"]).await;
    assert_eq!(seen["problems"], serde_json::json!([]), "{seen:#}");
    assert_eq!(seen["buttonWhileRunning"], "Steer", "{seen:#}");
    assert_eq!(
        seen["steers"],
        serde_json::json!([{"text": "echo steered", "steered": true}])
    );
    let done = &seen["after"];
    assert_eq!(done["status"], "done", "{done:#}");
    let messages = done["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "one run: {done:#}");
    let answer = &messages[1];
    assert_eq!(strings(&answer["steered"]), ["echo steered"], "{done:#}");
    let texts = strings(&answer["texts"]);
    assert_eq!(
        texts,
        [
            format!(
                "{}{} Done counting.",
                web_chat::COUNT_FIRST,
                web_chat::COUNT_REST
            ),
            "You wrote: steered".to_owned(),
        ],
        "{done:#}"
    );
    // Two model calls, the second hearing the words.
    assert_eq!(mock.requests().len(), 2);
    // The session holds them as the user's words, between the two answers.
    let stored = seen["afterReload"]["messages"].as_array().unwrap();
    let said: Vec<(String, Vec<String>)> = stored
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), strings(&m["texts"])))
        .collect();
    assert_eq!(said.len(), 4, "{said:?}");
    assert_eq!(
        said[2],
        ("user".to_owned(), vec!["echo steered".to_owned()])
    );
    assert_eq!(said[3].1, ["You wrote: steered"]);
}

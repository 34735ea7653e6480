//! `testing::CassetteRecorder` and `testing::CassettePlayer`, through the real clients: a run
//! recorded from the mock server replays with the server gone and gives the same events; a
//! request that differs is refused naming its first differing field; the recorded chunks
//! are served with their boundaries; the real-model cassettes replay through the player.

use agent_loop::provider::reqwest;
use agent_loop::testing::{
    Cassette, CassetteError, CassetteExchange, CassettePlayer, CassetteRecorder, MockResponse,
    MockServer, ScriptedResponse,
};
use agent_loop::{Agent, AgentEvent, AnthropicClient, LlmClient, LlmError, Message, OpenAiClient};
use futures::StreamExt;
use proptest::prelude::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;

/// Which client a test points at a base URL's root.
#[derive(Debug, Clone, Copy)]
enum Api {
    Anthropic,
    OpenAi,
    Responses,
}

fn client(api: Api, root: &str) -> Box<dyn LlmClient> {
    let retries = agent_loop::provider::transport::RetryPolicy::none();
    match api {
        Api::Anthropic => Box::new(
            AnthropicClient::new("key")
                .base_url(format!("{root}/anthropic"))
                .model("m")
                .retry_policy(retries),
        ),
        Api::OpenAi => Box::new(
            OpenAiClient::new("key")
                .base_url(format!("{root}/v1"))
                .model("m")
                .retry_policy(retries),
        ),
        Api::Responses => Box::new(
            OpenAiClient::new("key")
                .base_url(format!("{root}/v1"))
                .model("m")
                .retry_policy(retries)
                .responses(),
        ),
    }
}

/// The events of an agent run, without what a clock decides (tool run times).
fn timeless(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| match event {
            AgentEvent::ToolResult {
                id,
                name,
                content,
                is_error,
                ..
            } => format!("ToolResult {id} {name} {content} {is_error}"),
            AgentEvent::Finished(outcome) => format!(
                "Finished {:?} {:?} {} {:?}",
                outcome.termination, outcome.final_text, outcome.turns, outcome.usage
            ),
            other => format!("{other:?}"),
        })
        .collect()
}

async fn agent_run(api: Api, root: &str, question: &str) -> Vec<AgentEvent> {
    let mut agent = Agent::builder(client(api, root))
        .tool(common::agent::echo_tool())
        .build()
        .unwrap();
    agent.run(question).collect().await
}

fn script(server: &MockServer) {
    server.push(
        MockResponse::stream(
            ScriptedResponse::text("Let me echo that.")
                .then_tool_call("call_1", "echo", json!({"text": "héllo wörld"}))
                .chunked(3),
        )
        .chunk_size(5),
    );
    server.push(MockResponse::stream(
        ScriptedResponse::text("It said héllo wörld.").chunked(4),
    ));
}

/// A two-turn agent run (a tool call, then the answer) is recorded from the mock server
/// into a file; with the server stopped, the cassette replays through the same client and
/// the agent gives the same events, the player having checked every request.
#[tokio::test]
async fn a_run_recorded_from_the_mock_server_replays_without_it() {
    let dir = std::env::temp_dir().join(format!("agent-loop-cassette-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for api in [Api::Anthropic, Api::OpenAi, Api::Responses] {
        let file = dir.join(format!("{api:?}.json"));
        let recorded_events = {
            let upstream = MockServer::start().await;
            script(&upstream);
            let recorder = CassetteRecorder::start(upstream.url()).await;
            let events = agent_run(api, &recorder.url(), "Echo héllo wörld").await;
            let cassette = recorder.cassette().unwrap();
            assert_eq!(cassette.exchanges.len(), 2, "{api:?}");
            assert!(
                cassette.exchanges[0].chunks.len() > 1,
                "{api:?}: the response came in chunks"
            );
            cassette.save(&file).unwrap();
            assert_eq!(upstream.history_violations(), Vec::<String>::new());
            events
        }; // the mock server stops here
        assert!(
            matches!(
                recorded_events.last(),
                Some(AgentEvent::Finished(o)) if o.final_text == "It said héllo wörld."
            ),
            "{api:?}: {recorded_events:?}"
        );

        let player = CassettePlayer::start(Cassette::load(&file).unwrap()).await;
        let replayed = agent_run(api, &player.url(), "Echo héllo wörld").await;
        assert_eq!(timeless(&replayed), timeless(&recorded_events), "{api:?}");
        player.check().unwrap();
        assert_eq!(player.played(), 2);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One model response streamed by the client: the same `LlmEvent`s from the cassette as
/// from the server it was recorded from.
#[tokio::test]
async fn the_clients_events_are_the_same_replayed() {
    for api in [Api::Anthropic, Api::OpenAi, Api::Responses] {
        let request =
            agent_loop::provider::ModelRequest::new(vec![Message::user("Say something.")]);
        let upstream = MockServer::start().await;
        upstream.push(
            MockResponse::stream(
                ScriptedResponse::thinking("Hmm.", "sig")
                    .then_text("Something ✓.")
                    .chunked(2),
            )
            .chunk_size(3),
        );
        let recorder = CassetteRecorder::start(upstream.url()).await;
        let live: Vec<_> = client(api, &recorder.url())
            .stream(&request)
            .collect()
            .await;
        let cassette = recorder.cassette().unwrap();
        drop(upstream);
        let player = CassettePlayer::start(cassette).await;
        let replayed: Vec<_> = client(api, &player.url()).stream(&request).collect().await;
        assert_eq!(format!("{replayed:?}"), format!("{live:?}"), "{api:?}");
        assert!(live.iter().all(Result::is_ok), "{api:?}: {live:?}");
        player.check().unwrap();
    }
}

/// A request that differs from the recorded one is answered `400` naming the first
/// differing field, and `check` reports it; so does a request the cassette does not hold.
#[tokio::test]
async fn a_differing_request_fails_naming_the_field() {
    let upstream = MockServer::start().await;
    script(&upstream);
    let recorder = CassetteRecorder::start(upstream.url()).await;
    agent_run(Api::Anthropic, &recorder.url(), "Echo héllo wörld").await;
    let cassette = recorder.cassette().unwrap();
    drop(upstream);

    let player = CassettePlayer::start(cassette.clone()).await;
    let events = agent_run(Api::Anthropic, &player.url(), "Echo hello world").await;
    let Some(AgentEvent::Finished(outcome)) = events.last() else {
        panic!("{events:?}");
    };
    let text = format!("{:?}", outcome.termination);
    assert!(
        text.contains("messages[0].content[0].text") && text.contains("Echo hello world"),
        "{text}"
    );
    match player.check() {
        Err(CassetteError::Mismatch {
            request,
            field,
            recorded,
            sent,
        }) => {
            assert_eq!(request, 1);
            assert_eq!(field, "messages[0].content[0].text");
            assert_eq!(recorded, "\"Echo héllo wörld\"");
            assert_eq!(sent, "\"Echo hello world\"");
        }
        other => panic!("{other:?}"),
    }

    // The second request differs in its history: the tool's answer, three levels down.
    let mut changed = cassette.clone();
    changed.exchanges[1].request["messages"][2]["content"][0]["content"] = json!("other");
    let player = CassettePlayer::start(changed).await;
    agent_run(Api::Anthropic, &player.url(), "Echo héllo wörld").await;
    let failure = player.check().unwrap_err().to_string();
    assert!(
        failure.starts_with(
            "request #2 differs from the recorded one at messages[2].content[0].content"
        ),
        "{failure}"
    );

    // Fewer exchanges than requests.
    let mut short = cassette.clone();
    short.exchanges.truncate(1);
    let player = CassettePlayer::start(short).await;
    agent_run(Api::Anthropic, &player.url(), "Echo héllo wörld").await;
    assert!(
        matches!(
            player.check(),
            Err(CassetteError::Unrecorded {
                request: 2,
                recorded: 1
            })
        ),
        "{:?}",
        player.check()
    );

    // More exchanges than requests.
    let player = CassettePlayer::start(cassette).await;
    assert!(matches!(
        player.check(),
        Err(CassetteError::Unplayed {
            played: 0,
            recorded: 2
        })
    ));
}

/// The client sees the recorded status, error body and headers: a recorded 429 replays as
/// the same `ApiError`, with its `retry-after`.
#[tokio::test]
async fn an_error_status_and_its_headers_replay() {
    let upstream = MockServer::start().await;
    upstream.push(
        MockResponse::status(429)
            .retry_after(7)
            .error_message("slow down"),
    );
    let recorder = CassetteRecorder::start(upstream.url()).await;
    let request = agent_loop::provider::ModelRequest::new(vec![Message::user("hi")]);
    let live: Vec<_> = client(Api::Anthropic, &recorder.url())
        .stream(&request)
        .collect()
        .await;
    let cassette = recorder.cassette().unwrap();
    assert_eq!(cassette.exchanges[0].status, 429);
    assert!(cassette.exchanges[0]
        .headers
        .contains(&("retry-after".to_owned(), "7".to_owned())));
    drop(upstream);
    let player = CassettePlayer::start(cassette).await;
    let replayed: Vec<_> = client(Api::Anthropic, &player.url())
        .stream(&request)
        .collect()
        .await;
    let Some(Err(LlmError::Api(api))) = replayed.last() else {
        panic!("{replayed:?}");
    };
    assert_eq!(api.status, 429);
    assert!(api.message.contains("slow down"), "{}", api.message);
    assert_eq!(format!("{replayed:?}"), format!("{live:?}"));
}

/// A body the upstream broke off mid-stream is recorded as such and broken off again on
/// replay: the client fails the same way.
#[tokio::test]
async fn a_body_broken_off_replays_broken_off() {
    let upstream = MockServer::start().await;
    upstream.push(
        MockResponse::stream(ScriptedResponse::text("Half of an answer that stops.").chunked(4))
            .chunk_size(16)
            .disconnect_after_bytes(200),
    );
    let recorder = CassetteRecorder::start(upstream.url()).await;
    let request = agent_loop::provider::ModelRequest::new(vec![Message::user("hi")]);
    let live: Vec<_> = client(Api::Anthropic, &recorder.url())
        .stream(&request)
        .collect()
        .await;
    assert!(matches!(live.last(), Some(Err(_))), "{live:?}");
    let cassette = recorder.cassette().unwrap();
    assert!(cassette.exchanges[0].broken_off);
    let cassette = Cassette::from_json(&cassette.to_json()).unwrap();
    assert!(cassette.exchanges[0].broken_off);
    drop(upstream);
    let player = CassettePlayer::start(cassette).await;
    let replayed: Vec<_> = client(Api::Anthropic, &player.url())
        .stream(&request)
        .collect()
        .await;
    assert_eq!(format!("{replayed:?}"), format!("{live:?}"));
    player.check().unwrap();
}

/// The HTTP chunks of a response, read off the socket: the chunked framing says where each
/// one ends, whatever the reads.
async fn raw_chunks(url: &str, body: &str) -> Vec<Vec<u8>> {
    let addr = url.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    socket.read_to_end(&mut all).await.unwrap();
    let at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut rest = &all[at..];
    let mut chunks = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            return chunks;
        }
        chunks.push(rest[..size].to_vec());
        rest = &rest[size + 2..];
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any chunks (UTF-8 or not) are served one HTTP chunk each, as recorded, after a trip
    /// through the file; recording that replay keeps every boundary the player served (an
    /// HTTP client may hand a chunk over in pieces, never two chunks as one) and every byte.
    #[test]
    fn chunk_boundaries_are_kept(chunks in proptest::collection::vec(
        proptest::collection::vec(any::<u8>(), 1..40), 1..8)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let cassette = Cassette::new(vec![CassetteExchange::new(
                "/v1/chat/completions", json!({"model": "m"}), 200, "text/event-stream",
                chunks.clone(),
            )]);
            let cassette = Cassette::from_json(&cassette.to_json()).unwrap();
            let player = CassettePlayer::start(cassette.clone()).await;
            let served = raw_chunks(&player.url(), "{\"model\":\"m\"}").await;
            prop_assert_eq!(&served, &chunks);
            player.check().unwrap();

            let player = CassettePlayer::start(cassette).await;
            let recorder = CassetteRecorder::start(player.url()).await;
            let response = reqwest::Client::new()
                .post(format!("{}/v1/chat/completions", recorder.url()))
                .header("content-type", "application/json")
                .body("{\"model\":\"m\"}")
                .send()
                .await
                .unwrap();
            let got = response.bytes().await.unwrap();
            prop_assert_eq!(got.to_vec(), chunks.concat());
            let again = recorder.cassette().unwrap();
            let recorded = &again.exchanges[0].chunks;
            prop_assert_eq!(recorded.concat(), chunks.concat());
            let cuts = |chunks: &[Vec<u8>]| {
                chunks.iter().scan(0, |at, c| { *at += c.len(); Some(*at) }).collect::<Vec<_>>()
            };
            let kept = cuts(recorded);
            for cut in cuts(&chunks) {
                prop_assert!(kept.contains(&cut), "boundary {} lost: {:?}", cut, recorded);
            }
            Ok(())
        })?;
    }
}

/// The real-model cassettes (`tests/fixtures/real_model/`, recorded from llama.cpp by
/// `cassettes::Recorder`) are in the player's format: each replays through the player with
/// the scenario's agent sending exactly the recorded requests.
#[tokio::test]
async fn the_real_model_cassettes_play() {
    use crate::real_model::{retries, run_checked, scenario, Endpoint, MODEL};
    let dir = format!("{}/tests/fixtures/real_model", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cassette = Cassette::from_json(&text).unwrap();
        let endpoint: Endpoint = serde_json::from_value(meta["endpoint"].clone()).unwrap();
        let player = CassettePlayer::start(cassette).await;
        let (root, openai) = (player.url(), format!("{}/v1", player.url()));
        let client: Box<dyn LlmClient> = match endpoint {
            Endpoint::OpenAi => Box::new(
                OpenAiClient::new("")
                    .base_url(openai)
                    .model(MODEL)
                    .retry_policy(retries()),
            ),
            Endpoint::Anthropic => Box::new(
                AnthropicClient::new("k")
                    .base_url(root)
                    .model(MODEL)
                    .retry_policy(retries()),
            ),
            Endpoint::Responses => Box::new(
                OpenAiClient::new("")
                    .base_url(openai)
                    .model(MODEL)
                    .retry_policy(retries())
                    .responses(),
            ),
        };
        let (mut agent, input) = scenario(meta["scenario"].as_str().unwrap(), client);
        run_checked(&mut agent, input, None).await;
        player
            .check()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

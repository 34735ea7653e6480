//! `LoopbackServer`: an OpenAI Chat Completions server on 127.0.0.1 that answers from prebuilt
//! SSE bodies and reads each request only far enough to skip it (no JSON parse, nothing kept),
//! so that a run over HTTP pays for its own client and not for the server's work. Shared by the
//! `agent` bench and the `per_turn` example (`#[path]` modules), beside `ReplayClient`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// The server; dropping it leaves its task to end with the runtime.
#[derive(Debug)]
pub(crate) struct LoopbackServer {
    addr: std::net::SocketAddr,
    script: Arc<Mutex<VecDeque<Vec<u8>>>>,
}

impl LoopbackServer {
    /// Starts the server on an ephemeral loopback port (inside a tokio runtime).
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script: Arc<Mutex<VecDeque<Vec<u8>>>> = Arc::default();
        let queue = script.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                socket.set_nodelay(true).ok();
                tokio::spawn(serve(socket, queue.clone()));
            }
        });
        LoopbackServer { addr, script }
    }

    /// The base URL for an `OpenAiClient`.
    pub(crate) fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Scripts one run of `turns` model calls, the same as `ReplayClient::new(turns)`: a call
    /// to `step` in each turn but the last, which answers in text.
    pub(crate) fn push_run(&self, turns: usize) {
        let mut script = self.script.lock().unwrap();
        for i in 1..=turns {
            let (delta, finish) = if i < turns {
                (
                    format!(
                        r#"{{"role":"assistant","tool_calls":[{{"index":0,"id":"call_{i:05}","type":"function","function":{{"name":"step","arguments":"{{\"n\":{i}}}"}}}}]}}"#
                    ),
                    "tool_calls",
                )
            } else {
                (
                    r#"{"role":"assistant","content":"All steps are done."}"#.to_owned(),
                    "stop",
                )
            };
            let body = format!(
                "data: {{\"id\":\"chatcmpl-{i}\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n\
                 data: {{\"id\":\"chatcmpl-{i}\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":20,\"total_tokens\":{}}}}}\n\n\
                 data: [DONE]\n\n",
                400 + 30 * i,
                420 + 30 * i,
            );
            let mut response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            response.extend_from_slice(body.as_bytes());
            script.push_back(response);
        }
    }
}

/// One connection: requests in, scripted answers out, until the client closes it.
async fn serve(socket: tokio::net::TcpStream, script: Arc<Mutex<VecDeque<Vec<u8>>>>) {
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        let mut length = 0usize;
        loop {
            line.clear();
            match read.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        body.resize(length, 0);
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        let answer = script.lock().unwrap().pop_front();
        let Some(answer) = answer else {
            let _ = write
                .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                .await;
            return;
        };
        if write.write_all(&answer).await.is_err() {
            return;
        }
    }
}

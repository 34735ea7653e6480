//! The main example: an agent with one tool, a calculator.
//!
//! `cargo run --example calculator` works with no API key: the crate's loopback mock server
//! plays a scripted model over real HTTP and SSE. With `ANTHROPIC_API_KEY` (or
//! `OPENAI_API_KEY`, optionally with `OPENAI_BASE_URL` and `OPENAI_MODEL`) it asks a real model.
//! Pass your own question as arguments.

mod common;

use agent_loop::testing::ScriptedResponse;
use agent_loop::{Agent, FnTool, Termination, ToolError};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;

/// The calculator's input, as the model sees it (the JSON Schema is derived from this type).
#[derive(Deserialize, schemars::JsonSchema)]
struct CalcInput {
    /// An arithmetic expression with + - * / ^, parentheses and decimal numbers, e.g. "(2 + 3) * 4".
    expression: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let question = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let question = if question.is_empty() {
        "What is (17 + 25) * 3, and what is that divided by 7?".to_owned()
    } else {
        question
    };

    // What the mock model answers when no API key is set.
    let script = vec![
        ScriptedResponse::text("I'll compute both with the calculator.")
            .then_tool_call(
                "call_1",
                "calculator",
                json!({"expression": "(17 + 25) * 3"}),
            )
            .then_tool_call(
                "call_2",
                "calculator",
                json!({"expression": "(17 + 25) * 3 / 7"}),
            )
            .usage_tokens(412, 58)
            .chunked(4),
        ScriptedResponse::text("(17 + 25) × 3 = **126**, and 126 ÷ 7 = **18**.")
            .usage_tokens(520, 21)
            .chunked(4),
    ];
    let model = common::model(script).await;
    println!("Model: {}", model.description);
    println!("You: {question}");

    let calculator = FnTool::new(
        "calculator",
        "Evaluates an arithmetic expression exactly as written and returns the number.",
        |input: CalcInput, _ctx| async move {
            eval(&input.expression)
                .map(|v| v.to_string())
                .map_err(|e| ToolError::new(format!("cannot evaluate {:?}: {e}", input.expression)))
        },
    )
    .read_only(true);

    let mut agent = Agent::builder(model.client.clone())
        .system("You are a careful assistant. Use the calculator for every computation.")
        .tool(calculator)
        .max_turns(8)
        .build()?;

    let mut events = agent.run(question);
    let mut outcome = None;
    while let Some(event) = events.next().await {
        outcome = common::render(&event).or(outcome);
    }
    match outcome.map(|o| o.termination) {
        Some(Termination::Completed) => Ok(()),
        Some(other) => Err(format!("the run ended: {other}").into()),
        None => Err("the run ended without an outcome".into()),
    }
}

/// A small recursive-descent evaluator: expr = term (('+'|'-') term)*, term = power (('*'|'/') power)*,
/// power = unary ('^' power)?, unary = '-' unary | atom, atom = number | '(' expr ')'.
fn eval(expression: &str) -> Result<f64, String> {
    let mut p = Parser {
        s: expression.as_bytes(),
        i: 0,
    };
    let v = p.expr()?;
    p.skip_ws();
    if p.i != p.s.len() {
        return Err(format!(
            "unexpected {:?} at position {}",
            p.s[p.i] as char, p.i
        ));
    }
    if !v.is_finite() {
        return Err("the result is not a finite number (division by zero?)".into());
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expr(&mut self) -> Result<f64, String> {
        let mut v = self.term()?;
        loop {
            if self.eat(b'+') {
                v += self.term()?;
            } else if self.eat(b'-') {
                v -= self.term()?;
            } else {
                return Ok(v);
            }
        }
    }
    fn term(&mut self) -> Result<f64, String> {
        let mut v = self.power()?;
        loop {
            if self.eat(b'*') {
                v *= self.power()?;
            } else if self.eat(b'/') {
                v /= self.power()?;
            } else {
                return Ok(v);
            }
        }
    }
    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.eat(b'^') {
            Ok(base.powf(self.power()?))
        } else {
            Ok(base)
        }
    }
    fn unary(&mut self) -> Result<f64, String> {
        if self.eat(b'-') {
            return Ok(-self.unary()?);
        }
        if self.eat(b'(') {
            let v = self.expr()?;
            if !self.eat(b')') {
                return Err("missing ')'".into());
            }
            return Ok(v);
        }
        self.skip_ws();
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_digit() || *c == b'.')
        {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("expected a number at position {start}"))
    }
}

// Drives the web_chat example's page in headless Chromium (Debian's, never a downloaded one)
// with playwright-core, through one scenario, and prints what the page showed as JSON;
// tests/web_chat.rs asserts it. Every wait is on a condition of the page, never a delay.
//
//   node tests/js/web-chat-browser.mjs <page url> <chromium path> <scenario> [screenshot.png]
//
// Scenarios:
//   approve, deny   ask to tidy up the logs, wait for the call that needs approval, click
//                   Approve (or Deny), wait for the run to finish;
//   type-instead    the same, but type a new message instead of answering: the chat goes on,
//                   the call shown denied; then a second tidy-up is approved; then a reload;
//   markdown        a Markdown answer, and an echoed message full of HTML that must stay text;
//   stop            a story that never ends, stopped with the Stop button; then a new message;
//   refused         the server answers 400 once (a route of the browser's): the page says why
//                   and the chat goes on;
//   reconnect       ask to count, whose answer the test's gate holds after its first words;
//                   cut the connection (the test server's POST /test/cut): the page takes the
//                   stream up again with Last-Event-ID; reload the page mid-answer: it takes
//                   the run up from its start; open the gate (POST /test/open): the answer
//                   ends; reload once more: the conversation from the server.
//   steer           ask to count (held after its first words), write "echo steered" while it
//                   streams (Send steers the run: POST /api/chat/{id}/steer), open the gate:
//                   the run answers the count, hears the words, answers them; then a reload.
import { chromium } from "playwright-core";

const [url, executablePath, scenario, screenshot] = process.argv.slice(2);
const scenarios = ["approve", "deny", "type-instead", "markdown", "stop", "refused", "reconnect", "steer"];
if (!scenarios.includes(scenario)) throw new Error("the scenario is one of " + scenarios.join(", "));
const browser = await chromium.launch({
  executablePath,
  headless: true,
  // As root, and on a machine with no outside network: no sandbox, no background traffic.
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const WAIT = { timeout: 60_000 };
const WAITING = '[data-tool="delete_file"][data-state="approval-requested"]';
try {
  const page = await browser.newPage({ viewport: { width: 900, height: 760 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  const cuts = [];
  page.on("console", (m) => {
    // A refused request's status is logged by Chromium itself; the page handles it. So is a
    // stream the test cut (the reconnect scenario), which the page takes up again.
    if (m.type() !== "error" || /status of 4\d\d/.test(m.text())) return;
    if (scenario === "reconnect" && /ERR_INCOMPLETE_CHUNKED_ENCODING/.test(m.text())) cuts.push(m.text());
    else problems.push("console: " + m.text());
  });
  // Every distinct text the page showed, in order, for the first answer text and for each
  // tool's arguments: more than one means they streamed in.
  await page.addInitScript(() => {
    window.__seen = { text: [], args: {} };
    new MutationObserver(() => {
      const text = document.querySelector('[data-role="assistant"] [data-part="text"]');
      const seen = window.__seen;
      if (text && seen.text[seen.text.length - 1] !== text.textContent) seen.text.push(text.textContent);
      for (const tool of document.querySelectorAll("[data-tool]")) {
        const name = tool.dataset.tool;
        const args = tool.querySelector("[data-args]").textContent;
        const list = (seen.args[name] ||= []);
        if (list[list.length - 1] !== args) list.push(args);
      }
    }).observe(document, { subtree: true, childList: true, characterData: true });
  });

  await page.goto(url);
  await page.waitForSelector('#status:not([data-status="loading"])', WAIT);
  const title = await page.title();
  const result = { title, scenario };

  if (scenario === "approve" || scenario === "deny") {
    await askToTidy(page);
    result.beforeApproval = await snapshot(page);
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: false });
    await page.click(`${WAITING} [data-action="${scenario}"]`);
    await waitStatus(page, "done");
    result.afterApproval = await snapshot(page);
    result.seen = await page.evaluate(() => window.__seen);
  } else if (scenario === "type-instead") {
    await askToTidy(page);
    result.beforeTyping = await snapshot(page);
    await say(page, "Actually, keep everything.");
    await waitStatus(page, "done");
    result.afterTyping = await snapshot(page);
    // Nothing wedged: a second tidy-up pauses again, and its approval goes through.
    await askToTidy(page);
    await page.click(`${WAITING} [data-action="approve"]`);
    await waitStatus(page, "done");
    result.afterApproval = await snapshot(page);
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    // A reload shows the same conversation, loaded from the server.
    await page.reload();
    await page.waitForSelector('#status:not([data-status="loading"])', WAIT);
    result.afterReload = await snapshot(page);
  } else if (scenario === "markdown") {
    await say(page, "hello");
    await waitStatus(page, "done");
    await say(page, 'echo **bold** <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script> [a link](javascript:window.__xss=3) [home](https://example.org/)');
    await waitStatus(page, "done");
    result.after = await snapshot(page);
    result.html = await page.evaluate(() => {
      const answers = [...document.querySelectorAll('[data-role="assistant"] [data-part="text"]')];
      const log = document.getElementById("log");
      return {
        strong: answers.flatMap((a) => [...a.querySelectorAll("strong")].map((e) => e.textContent)),
        em: answers.flatMap((a) => [...a.querySelectorAll("em")].map((e) => e.textContent)),
        code: answers.flatMap((a) => [...a.querySelectorAll("code")].map((e) => e.textContent)),
        links: [...log.querySelectorAll("a")].map((a) => ({ text: a.textContent, href: a.getAttribute("href") })),
        images: log.querySelectorAll("img").length,
        scripts: log.querySelectorAll("script").length,
        xss: window.__xss ?? null,
        echoed: answers[answers.length - 1]?.textContent ?? null,
      };
    });
  } else if (scenario === "stop") {
    await say(page, "Tell me a long story.");
    await page.waitForFunction(
      () => [...document.querySelectorAll('[data-role="assistant"] [data-part="text"]')]
        .some((e) => e.textContent.includes("grew and grew")),
      null,
      WAIT,
    );
    result.stopShown = await page.isVisible("#stop");
    await page.click("#stop");
    await waitStatus(page, "stopped");
    result.afterStop = await snapshot(page);
    result.stopHidden = !(await page.isVisible("#stop"));
    // The chat goes on.
    await say(page, "hello");
    await waitStatus(page, "done");
    result.afterNext = await snapshot(page);
  } else if (scenario === "refused") {
    let refusals = 0;
    await page.route("**/api/chat", async (route) => {
      if (route.request().method() === "POST" && refusals === 0) {
        refusals++;
        await route.fulfill({
          status: 400,
          contentType: "application/json",
          body: JSON.stringify({ error: "the last message must be a user message: no run waits for answers" }),
        });
      } else {
        await route.continue();
      }
    });
    await say(page, "hello");
    await page.waitForSelector("#notice:not([hidden])", WAIT);
    await page.waitForSelector("#send:not([disabled])", WAIT);
    result.afterRefusal = await snapshot(page);
    result.inputAfterRefusal = await page.inputValue("#input");
    // The person sends it again: it goes through.
    await page.click("#send");
    await waitStatus(page, "done");
    result.afterRetry = await snapshot(page);
  } else if (scenario === "steer") {
    const FIRST = "Counting: one, two, three,";
    await say(page, "Count to ten, please.");
    await waitText(page, FIRST);
    // Written while the answer streams (held after its first words): Send steers the run.
    result.buttonWhileRunning = await page.textContent("#send");
    await say(page, "echo steered");
    await page.waitForFunction(() => window.__steers.length === 1, null, WAIT);
    result.steers = await page.evaluate(() => window.__steers);
    await fetch(url + "/test/open", { method: "POST" });
    await waitStatus(page, "done");
    result.after = await snapshot(page);
    await page.reload();
    await page.waitForSelector('#status:not([data-status="loading"])', WAIT);
    result.afterReload = await snapshot(page);
  } else if (scenario === "reconnect") {
    const FIRST = "Counting: one, two, three,";
    await say(page, "Count to ten, please.");
    await waitText(page, FIRST);
    result.beforeCut = await snapshot(page);
    await fetch(url + "/test/cut", { method: "POST" });
    await page.waitForFunction(
      () => window.__reconnects >= 1 && document.getElementById("status").dataset.status === "running",
      null,
      WAIT,
    );
    result.idsBeforeReload = await page.evaluate(() => window.__eventIds);
    // A reload mid-answer: the new page follows the run from its first event.
    await page.reload();
    await waitText(page, FIRST);
    await waitStatus(page, "running");
    result.afterReload = await snapshot(page);
    await fetch(url + "/test/open", { method: "POST" });
    await waitStatus(page, "done");
    result.afterRest = await snapshot(page);
    result.idsAfterReload = await page.evaluate(() => window.__eventIds);
    // Once over, a reload shows the conversation from the server's session.
    await page.reload();
    await page.waitForSelector('#status:not([data-status="loading"])', WAIT);
    result.afterSecondReload = await snapshot(page);
    result.cutsLogged = cuts.length;
  }
  result.problems = problems;
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
}

async function waitStatus(page, status) {
  await page.waitForSelector(`#status[data-status="${status}"]`, WAIT);
}

async function waitText(page, text) {
  await page.waitForFunction(
    (text) => [...document.querySelectorAll('[data-role="assistant"] [data-part="text"]')]
      .some((e) => e.textContent.includes(text)),
    text,
    WAIT,
  );
}

async function say(page, text) {
  await page.fill("#input", text);
  await page.click("#send");
}

/// Asks to tidy up the logs and waits for the deletion that needs approval.
async function askToTidy(page) {
  await say(page, "Please tidy up the logs.");
  await page.waitForSelector(WAITING, WAIT);
  await waitStatus(page, "waiting for approval");
}

/// What the page shows: each message's role, texts, reasoning, notes and tool boxes; the
/// status and the notice.
async function snapshot(page) {
  return page.evaluate(() => {
    const notice = document.getElementById("notice");
    return {
      status: document.getElementById("status").dataset.status,
      notice: notice.hidden ? null : document.getElementById("notice-text").textContent,
      messages: [...document.querySelectorAll("[data-role]")].map((m) => ({
        role: m.dataset.role,
        texts: [...m.querySelectorAll('[data-part="text"]')].map((e) => e.textContent),
        reasoning: [...m.querySelectorAll('[data-part="reasoning"]')].map((e) => e.textContent),
        errors: [...m.querySelectorAll('[data-part="error"]')].map((e) => e.textContent),
        notes: [...m.querySelectorAll('[data-part="note"]')].map((e) => e.textContent),
        steered: [...m.querySelectorAll('[data-part="steered"]')].map((e) => e.textContent),
        tools: [...m.querySelectorAll("[data-tool]")].map((t) => ({
          name: t.dataset.tool,
          state: t.dataset.state,
          label: t.querySelector("[data-label]").textContent,
          args: t.querySelector("[data-args]").textContent,
          output: t.querySelector("[data-output]")?.textContent ?? null,
          buttons: [...t.querySelectorAll("button")].map((b) => b.textContent),
        })),
      })),
    };
  });
}

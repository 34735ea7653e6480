// Drives the web_chat example's page in headless Chromium (Debian's, never a downloaded one)
// with playwright-core: sends a message, waits for the streamed answer and the tool call that
// needs approval, clicks Approve (or Deny), and waits for the run to finish. Prints what the
// page showed as JSON; tests/web_chat.rs asserts it.
//
//   node tests/js/web-chat-browser.mjs <page url> <chromium path> <approve|deny> [screenshot.png]
import { chromium } from "playwright-core";

const [url, executablePath, verdict, screenshot] = process.argv.slice(2);
if (verdict !== "approve" && verdict !== "deny") throw new Error("the verdict is approve or deny");
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
try {
  const page = await browser.newPage({ viewport: { width: 900, height: 760 } });
  const problems = [];
  page.on("pageerror", (e) => problems.push("page error: " + e.message));
  page.on("console", (m) => m.type() === "error" && problems.push("console: " + m.text()));
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
  const title = await page.title();
  await page.fill("#input", "Please tidy up the logs.");
  await page.click("#send");

  const waiting = '[data-tool="delete_file"][data-state="approval-requested"]';
  await page.waitForSelector(waiting, { timeout: 60_000 });
  await page.waitForSelector('#status[data-status="waiting for approval"]', { timeout: 60_000 });
  const beforeApproval = await snapshot(page);
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: false });

  await page.click(`${waiting} [data-action="${verdict}"]`);
  await page.waitForSelector('#status[data-status="done"]', { timeout: 60_000 });
  const afterApproval = await snapshot(page);
  const seen = await page.evaluate(() => window.__seen);

  console.log(JSON.stringify({ title, beforeApproval, afterApproval, seen, problems }));
} finally {
  await browser.close();
}

/// What the page shows: each message's role, texts, reasoning and tool boxes; the status.
async function snapshot(page) {
  return page.evaluate(() => ({
    status: document.getElementById("status").dataset.status,
    messages: [...document.querySelectorAll("[data-role]")].map((m) => ({
      role: m.dataset.role,
      texts: [...m.querySelectorAll('[data-part="text"]')].map((e) => e.textContent),
      reasoning: [...m.querySelectorAll('[data-part="reasoning"]')].map((e) => e.textContent),
      errors: [...m.querySelectorAll('[data-part="error"]')].map((e) => e.textContent),
      tools: [...m.querySelectorAll("[data-tool]")].map((t) => ({
        name: t.dataset.tool,
        state: t.dataset.state,
        args: t.querySelector("[data-args]").textContent,
        output: t.querySelector("[data-output]")?.textContent ?? null,
        buttons: [...t.querySelectorAll("button")].map((b) => b.textContent),
      })),
    })),
  }));
}

// A small remote control for Debian's Chromium through playwright-core, for the browser tests (issue 19).
//
// The tests are Python (tests/e2e/browser.py); this process owns one headless Chromium and one browser
// context (one cookie jar, like one person's browser) and runs commands it reads from stdin, one JSON
// object per line: {"id": 1, "op": "goto", "page": "p1", "url": "..."}. Each gets one JSON line back on
// stdout: {"id": 1, "ok": true, "result": ...} or {"id": 1, "ok": false, "error": "..."}.
// Every page records its document requests (redirect hops included), the console errors (CSP
// violations appear there) and the sub-resources that failed to load.
//
// Usage: node driver.mjs   (CHROMIUM=/usr/bin/chromium by default)
import * as readline from 'node:readline';

import { chromium } from 'playwright-core';

const TIMEOUT_MS = Number(process.env.BROWSER_TIMEOUT_MS ?? 20000);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  // Tests run as root in CI: Chromium's sandbox refuses root.
  args: ['--no-sandbox', '--disable-dev-shm-usage'],
});
const context = await browser.newContext({ colorScheme: 'light', viewport: { width: 1280, height: 900 } });
context.setDefaultTimeout(TIMEOUT_MS);

const pages = new Map();
let nextPage = 1;

function record(page) {
  const info = { page, navigations: [], consoleErrors: [], failedResources: [] };
  // Every document request of the tab, each hop of a redirect chain included.
  page.on('request', (request) => {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) info.navigations.push(request.url());
  });
  // Failed loads are reported with their URL here (the console's "Failed to load resource" has none).
  page.on('response', (response) => {
    const type = response.request().resourceType();
    if (response.status() >= 400 && type !== 'document') {
      info.failedResources.push(`${response.status()} ${type} ${response.url()}`);
    }
  });
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) {
      info.consoleErrors.push(message.text());
    }
  });
  page.on('pageerror', (error) => info.consoleErrors.push(`pageerror: ${error.message}`));
  return info;
}

function pageOf(command) {
  const info = pages.get(command.page);
  if (!info) throw new Error(`no page ${command.page}`);
  return info;
}

const ops = {
  async newPage() {
    const id = `p${nextPage++}`;
    pages.set(id, record(await context.newPage()));
    return id;
  },
  async goto(c) {
    const response = await pageOf(c).page.goto(c.url, { waitUntil: 'load' });
    return { url: pageOf(c).page.url(), status: response?.status() ?? null, headers: (await response?.allHeaders()) ?? {} };
  },
  async fill(c) {
    await pageOf(c).page.fill(c.selector, c.value);
  },
  async check(c) {
    await pageOf(c).page.check(c.selector);
  },
  async selectOption(c) {
    await pageOf(c).page.selectOption(c.selector, c.value);
  },
  async click(c) {
    // A click that submits a form or follows a link: wait for the page it leads to.
    const { page } = pageOf(c);
    await page.click(c.selector);
    await page.waitForLoadState('load');
    return page.url();
  },
  async waitForUrl(c) {
    const { page } = pageOf(c);
    await page.waitForURL(new RegExp(c.pattern), { waitUntil: 'load' });
    return page.url();
  },
  async waitForSelector(c) {
    await pageOf(c).page.waitForSelector(c.selector, { state: c.state ?? 'visible' });
  },
  async evaluate(c) {
    return pageOf(c).page.evaluate(c.expression);
  },
  async url(c) {
    return pageOf(c).page.url();
  },
  async content(c) {
    return pageOf(c).page.content();
  },
  async screenshot(c) {
    await pageOf(c).page.screenshot({ path: c.path, fullPage: true });
  },
  async navigations(c) {
    return pageOf(c).navigations;
  },
  async consoleErrors(c) {
    return pageOf(c).consoleErrors;
  },
  async failedResources(c) {
    return pageOf(c).failedResources;
  },
  async cookies() {
    return (await context.cookies()).map(({ name, domain, path }) => ({ name, domain, path }));
  },
  async clearCookies(c) {
    await context.clearCookies(c.name ? { name: c.name } : {});
  },
  async close() {
    await browser.close();
    return null;
  },
};

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  let reply;
  try {
    const op = ops[command.op];
    if (!op) throw new Error(`unknown op ${command.op}`);
    reply = { id: command.id, ok: true, result: (await op(command)) ?? null };
  } catch (error) {
    reply = { id: command.id, ok: false, error: String(error?.message ?? error) };
  }
  process.stdout.write(`${JSON.stringify(reply)}\n`);
  if (command.op === 'close') break;
}
await browser.close().catch(() => {});
process.exit(0);

import type { Browser, BrowserContext, Page } from "playwright-core";
import { expect } from "vitest";
import type { Clock } from "../../shared/runtime/clock.ts";
import { collectPageErrors, launchChromium } from "./browser.ts";
import { removeDir, testRuntime, waitFor } from "./runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;

/**
 * A browser test's world: the local runtime on 127.0.0.1 and headless Chromium, started side by side; the
 * instructor API behind the runtime's token; browser contexts that collect their page errors.
 */
export interface E2e {
  rt: Runtime;
  browser: Browser;
  /** Console errors, page errors and failed subresources, one list per context: a test expects none. */
  pageErrors: string[][];
  /** `/api/workshops{path}` with the token; fails the test on anything but a 2xx. */
  // biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field by the tests
  api(method: string, path: string, body?: unknown): Promise<any>;
  newContext(options?: Parameters<Browser["newContext"]>[0]): Promise<BrowserContext>;
  close(): Promise<void>;
}

export async function startE2e(opts: { clock?: Clock } = {}): Promise<E2e> {
  const [started, launched] = await Promise.allSettled([
    testRuntime(opts.clock ? { clock: opts.clock } : {}),
    launchChromium(),
  ]);
  if (started.status === "rejected" || launched.status === "rejected") {
    if (launched.status === "fulfilled") await launched.value.close();
    if (started.status === "fulfilled") {
      await started.value.close();
      removeDir(started.value.dataDir);
    }
    throw started.status === "rejected" ? started.reason : (launched as PromiseRejectedResult).reason;
  }
  const rt = started.value;
  const browser = launched.value;
  const pageErrors: string[][] = [];
  return {
    rt,
    browser,
    pageErrors,
    async api(method, path, body = {}) {
      const res = await fetch(`${rt.url}/api/workshops${path}`, {
        method,
        headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
        ...(method === "GET" ? {} : { body: JSON.stringify(body) }),
      });
      const json = await res.json();
      expect(res.status, JSON.stringify(json)).toBeLessThan(300);
      return json;
    },
    async newContext(options = {}) {
      const context = await browser.newContext({ baseURL: rt.url, ...options });
      context.setDefaultTimeout(8_000);
      pageErrors.push(collectPageErrors(context));
      return context;
    },
    async close() {
      try {
        await browser.close();
      } finally {
        await rt.close();
        removeDir(rt.dataDir);
      }
    },
  };
}

/** Submits workshop.yaml, runs `up` and waits until `count` labs are ready; opens the portal and returns its code. */
export async function readyWorkshop(e: E2e, name: string, yaml: string, count: number): Promise<string> {
  await e.api("POST", "", { yaml });
  await e.api("POST", `/${name}/up`);
  await waitFor(`${count} ready labs`, async () => {
    const s = await e.api("GET", `/${name}`);
    return s.hostList.length === count && s.hostList.every((h: { state: string }) => h.state === "ready")
      ? true
      : undefined;
  });
  return (await e.api("POST", `/${name}/portal/open`)).code;
}

/** What a student does in the portal: the code, then the claim form; returns the lab page's path. */
export async function claimInBrowser(
  p: Page,
  code: string,
  student: { name: string; email: string; pin: string },
): Promise<string> {
  await p.goto("/");
  await p.getByLabel("Workshop code").fill(code);
  await p.getByRole("button", { name: "Continue" }).click();
  await p.waitForURL(/\/board$/);
  await p.getByLabel("Your name", { exact: true }).fill(student.name);
  await p.getByLabel("Your email", { exact: true }).fill(student.email);
  await p.getByLabel("Choose a 6-digit PIN").fill(student.pin);
  await p.getByRole("button", { name: "Claim my lab" }).click();
  await p.waitForURL(/\/l\/[\w-]{32}$/);
  return new URL(p.url()).pathname;
}

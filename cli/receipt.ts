import type { Receipt } from "../shared/fleet/receipt.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { block, clean, jsonText, type Output, paint, when, writeTable } from "./render.ts";

/** The receipt of a workshop's last teardown, as GET /api/workshops/{name}/receipt answers it. */
export type ReceiptView = Receipt;

export function fetchReceipt(client: ApiClient, name: string): Promise<{ receipt: ReceiptView }> {
  return client.call<{ receipt: ReceiptView }>("GET", `/workshops/${encodeURIComponent(name)}/receipt`);
}

function usageLine(u: ReceiptView["usage"]): string {
  const earlier = u.earlier ? ` (${u.earlier.hosts} removed earlier: ${u.earlier.hostHours.toFixed(2)})` : "";
  const hours = `${u.hostHours.toFixed(2)} host-hours on ${u.hosts} host${u.hosts === 1 ? "" : "s"}${earlier}`;
  const cost = u.costUsd === undefined ? "cost unknown" : `$${u.costUsd.toFixed(2)}`;
  return `${hours} · ${cost} (${clean(u.basis)})`;
}

/** The receipt as text: the usage, what was removed, and each thing left with why and its command. */
export function writeReceipt(r: ReceiptView, out: Output): void {
  const where = r.region ? ` in ${clean(r.region)}` : "";
  const ended = r.failed === undefined ? "teardown ended" : paint(out, "failed", "teardown FAILED");
  out.write(`receipt ${clean(r.workshop)} (${clean(r.provider)}${where}), ${ended} ${when(r.endedAt)}\n`);
  if (r.failed !== undefined) {
    out.write(`${block(r.failed)}\n`);
    out.write(`run it again to remove what is left: labfleet down ${clean(r.workshop)} --yes\n`);
  }
  out.write(`used: ${usageLine(r.usage)}\n`);
  if (r.removed.length) {
    out.write(`removed (${r.removed.length}):\n`);
    writeTable(
      [
        ["  kind", "id", "host", "detail"],
        ...r.removed.map((e) => [`  ${e.kind}`, e.id, e.hostId ?? "", e.detail ?? ""]),
      ],
      out,
    );
  }
  if (r.checkError) {
    out.write(`${paint(out, "failed", "the check for leftovers did not finish")}: ${block(r.checkError)}\n`);
  }
  if (r.left.length === 0) {
    out.write(
      r.checkError
        ? "nothing else was found left, but the check is incomplete\n"
        : `${paint(out, "ready", "nothing left")} (checked ${when(r.checkedAt)})\n`,
    );
    return;
  }
  out.write(`${paint(out, "failed", `left (${r.left.length})`)}:\n`);
  for (const l of r.left) {
    const host = l.hostId ? ` (${clean(l.hostId)})` : "";
    const by = l.foundBy === "sweeper" ? `, found by the sweeper at ${when(l.foundAt)}` : "";
    out.write(`  ${clean(l.kind)} ${clean(l.id)}${host}: ${clean(l.why)}${by}\n`);
    out.write(`    remove it: ${clean(l.command)}\n`);
    if (l.byHand) out.write(`    or by hand: ${clean(l.byHand)}\n`);
  }
}

/**
 * `labfleet receipt NAME`: exit 0 when nothing is left, 1 when something is (or the check did not finish, or
 * the teardown failed).
 */
export async function cmdReceipt(name: string, json: boolean, out: Output): Promise<number> {
  const { receipt } = await fetchReceipt(new ApiClient(resolveTarget()), name);
  if (json) out.write(jsonText({ receipt }));
  else writeReceipt(receipt, out);
  return receipt.left.length === 0 && !receipt.checkError && receipt.failed === undefined ? 0 : 1;
}

/**
 * `down`'s question on a terminal: the workshop's name, typed back as the console asks for it. Anything else
 * (or end of input) aborts. Off a terminal, without --yes, it refuses: a script must say --yes.
 */
export async function confirmDown(
  name: string,
  stakes: string,
  io: {
    input: NodeJS.ReadableStream & { isTTY?: boolean };
    prompt: { write(text: string): unknown };
  } = { input: process.stdin, prompt: process.stderr },
): Promise<void> {
  if (!io.input.isTTY) {
    throw new CliError(
      `down ${clean(name)} tears the workshop down and asks for its name on a terminal; this is not one: pass --yes to confirm (labfleet down ${clean(name)} --yes)`,
      1,
    );
  }
  io.prompt.write(
    `This tears down ${clean(name)}: ${stakes}\nType the workshop's name (${clean(name)}) to confirm: `,
  );
  const answer = await readLine(io.input);
  if (answer?.trim() !== name) {
    throw new CliError(
      `aborted: "${clean(answer?.trim() ?? "")}" is not ${clean(name)}; nothing was changed`,
      1,
    );
  }
}

function readLine(input: NodeJS.ReadableStream): Promise<string | undefined> {
  return new Promise((resolve) => {
    let text = "";
    const done = (value: string | undefined) => {
      input.off("data", onData);
      input.off("end", onEnd);
      input.pause();
      resolve(value);
    };
    const onData = (chunk: Buffer | string) => {
      text += chunk.toString();
      const nl = text.indexOf("\n");
      if (nl >= 0) done(text.slice(0, nl).replace(/\r$/, ""));
    };
    const onEnd = () => done(text.length ? text : undefined);
    input.on("data", onData);
    input.on("end", onEnd);
    input.resume();
  });
}

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { gunzipSync } from "node:zlib";
import { extract } from "tar-stream";
import type { ExtendResult } from "../shared/fleet/extend.ts";
import type { OpenAccessView } from "../shared/fleet/open-access.ts";
import type { DoctorReport } from "../shared/fleet/ops.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, checkedFile, follow, jsonOutput, report, selectionBody, workshopName } from "./main.ts";
import { block, clean, clock, jsonText, type Output, paint, when, writeTable } from "./render.ts";
import { runCheck, stageBody } from "./stage-commands.ts";

/**
 * The fleet operations: doctor, deploy, retry, diagnose, access, hosts, extend, open-access. Each is a client
 * of the API.
 */
export async function run(command: string, args: Args, out: Output): Promise<number> {
  const client = new ApiClient(resolveTarget());
  const staged = command === "deploy" || command === "retry";
  const stages = staged ? stageBody(args) : {};
  // --check changes nothing, so it submits nothing: it checks the workshop as submitted.
  const checking = staged && (args.values.check ?? false);
  // With -f, the file is validated and submitted first, so the operation acts on what the file says.
  let name: string;
  if (args.values.file) {
    const f = checkedFile(args.values.file);
    if (!checking) await client.submit(f.yaml, f.baseDir);
    name = f.name;
  } else if (command === "hosts") {
    // labfleet hosts SUB NAME
    name = workshopName({ ...args, positionals: [command, ...args.positionals.slice(2)] });
  } else name = workshopName(args);
  const path = `/workshops/${encodeURIComponent(name)}`;
  const json = jsonOutput(args);
  const sel = selectionBody(args);

  switch (command) {
    case "doctor": {
      const r = await client.call<{ ok: boolean; reports: DoctorReport[] }>("POST", `${path}/doctor`, sel);
      if (json) out.write(jsonText(r));
      else writeDoctor(r.reports, out);
      return r.ok ? 0 : 1;
    }
    case "deploy":
    case "retry": {
      if (args.values["failed-only"] && args.values["all-selected"]) {
        throw new CliError("choose --failed-only or --all-selected, not both", 2);
      }
      const body =
        command === "deploy"
          ? {
              ...sel,
              force: args.values.force ?? false,
              ...(args.values.ref ? { ref: args.values.ref } : {}),
              ...stages,
            }
          : {
              ...sel,
              allSelected: args.values["all-selected"] ?? false,
              force: args.values.force ?? false,
              ...stages,
            };
      if (checking) {
        const { concurrency: _, ...checked } = body;
        return runCheck(client, name, { command, ...checked }, json, out);
      }
      const started = await client.call<{ run: { id: string } | null; hosts?: string[] }>(
        "POST",
        `${path}/${command}`,
        body,
      );
      if (!started.run) {
        if (json) out.write(jsonText({ run: null, hosts: [] }));
        else out.write("nothing to retry: no selected host has failed\n");
        return 0;
      }
      if (!json)
        out.write(
          `${command} ${clean(name)}: run ${clean(started.run.id)}${started.hosts ? ` on ${started.hosts.map(clean).join(", ")}` : ""}\n`,
        );
      const s = await follow(client, name, started.run.id, json ? undefined : out);
      return report(s, started.run.id, json, out, "ready", args.values.file);
    }
    case "diagnose": {
      // A large diagnose comes in parts (each a few MB): every part goes into the one folder, and the parts'
      // index.json files are merged into one.
      let folder: string | undefined;
      let from: string | undefined;
      const index: { workshop?: string; collectedAt?: string; hosts: { id: string; error?: string }[] } = {
        hosts: [],
      };
      type Part = typeof index & { next?: string; more?: string };
      do {
        const res = await client.raw("POST", `${path}/diagnose`, {
          ...sel,
          allSelected: args.values["all-selected"] ?? false,
          ...(from ? { from, name: folder } : {}),
        });
        folder ??= res.headers.get("x-labfleet-diagnose-name") ?? `${name}.diagnose`;
        from = res.headers.get("x-labfleet-diagnose-next") ?? undefined;
        const files = await untar(Buffer.from(await res.arrayBuffer()));
        for (const [p, content] of files) {
          const target = join(process.cwd(), p);
          if (!target.startsWith(join(process.cwd(), folder))) continue; // never outside the folder
          if (p === `${folder}/index.json`) {
            const part = JSON.parse(content.toString("utf8")) as Part;
            index.workshop ??= part.workshop;
            index.collectedAt ??= part.collectedAt;
            index.hosts.push(...(part.hosts ?? []));
            continue;
          }
          mkdirSync(dirname(target), { recursive: true });
          writeFileSync(target, content, { mode: 0o600 });
        }
      } while (from);
      index.hosts.sort((a, b) => a.id.localeCompare(b.id));
      mkdirSync(join(process.cwd(), folder), { recursive: true });
      writeFileSync(join(process.cwd(), folder, "index.json"), jsonText(index), {
        mode: 0o600,
      });
      if (json) out.write(jsonText({ folder, ...index }));
      else {
        out.write(`wrote ${clean(folder)}/ (${index.hosts?.length ?? 0} hosts)\n`);
        for (const h of index.hosts ?? [])
          out.write(`  ${clean(h.id)}${h.error ? `  could not collect: ${clean(h.error)}` : ""}\n`);
      }
      return 0;
    }
    case "access": {
      const q = new URLSearchParams();
      for (const h of sel.hosts ?? []) q.append("host", h);
      for (const [k, v] of Object.entries(sel.labels ?? {})) q.append("label", `${k}=${v}`);
      const sheet = await client.call<{
        columns: string[];
        rows: {
          host: string;
          state: string;
          address: string;
          urls: Record<string, string>;
          credentials: boolean;
        }[];
      }>("GET", `${path}/access${q.size ? `?${q}` : ""}`);
      if (json) out.write(jsonText(sheet));
      else {
        const header = ["host", "state", "address", ...sheet.columns, "credentials"];
        const rows = sheet.rows.map((r) => [
          r.host,
          r.state,
          r.address,
          ...sheet.columns.map((c) => r.urls[c] ?? ""),
          r.credentials ? "stored (not shown)" : "-",
        ]);
        writeTable([header, ...rows], out);
      }
      return 0;
    }
    case "hosts": {
      const sub = args.positionals[1];
      if (sub === "keys") {
        const r = await client.call<{ keys: HostKeys[] }>("GET", `${path}/host-keys`);
        if (json) out.write(jsonText(r));
        else writeHostKeys(r.keys, out);
        return 0;
      }
      if (sub === "pin") {
        const hosts = sel.hosts ?? [];
        if (hosts.length !== 1) throw new CliError("hosts pin needs exactly one --host ID", 2);
        const host = hosts[0] as string;
        const keys = keyLines(args);
        const r = await client.call<{ pinned: HostKeys & { replaced?: HostKeys } }>(
          "PUT",
          `${path}/host-keys/${encodeURIComponent(host)}`,
          { keys, replace: args.values.replace ?? false },
        );
        if (json) out.write(jsonText(r));
        else {
          const p = r.pinned;
          out.write(
            `${clean(
              `pinned ${p.keys.map((k) => `${k.fingerprint} (${k.type})`).join(", ")} for ${p.hostId}${p.replaced ? `, replacing ${p.replaced.keys.map((k) => k.fingerprint).join(", ")} (${p.replaced.origin})` : ""}; labfleet now connects to it only when it shows ${p.keys.length === 1 ? "this key" : "one of these keys"}`,
            )}\n`,
          );
        }
        return 0;
      }
      if (sub === "credentials") {
        // A lab's own access details ($LABFLEET_ACCESS: URLs, users, passwords): shown only when asked
        // for one host by name, never by the access sheet.
        const hosts = sel.hosts ?? [];
        if (hosts.length !== 1) throw new CliError("hosts credentials needs exactly one --host ID", 2);
        const host = hosts[0] as string;
        const r = await client.call<{ access: unknown }>(
          "GET",
          `${path}/hosts/${encodeURIComponent(host)}/access`,
        );
        out.write(
          json ? jsonText({ host, access: r.access }) : jsonText(r.access), // JSON either way: its strings are escaped
        );
        return 0;
      }
      if (sub === "pubkey") {
        const r = await client.call<{ publicKey: string }>("GET", `${path}/ssh-public-key`);
        // The text form is the bare key line, ready for authorized_keys.
        out.write(json ? jsonText({ publicKey: r.publicKey }) : `${clean(r.publicKey)}\n`);
        return 0;
      }
      if (sub === "forget-key") {
        const hosts = sel.hosts ?? [];
        if (hosts.length === 0) throw new CliError("hosts forget-key needs --host ID", 2);
        const forgotten: { hostId: string; fingerprint: string }[] = [];
        for (const h of hosts) {
          let r: { forgotten: { hostId: string; fingerprint: string } };
          try {
            r = await client.call("DELETE", `${path}/host-keys/${encodeURIComponent(h)}`);
          } catch (err) {
            // With JSON, keys already forgotten are not lost: they are reported with the host that failed
            // (and the error still goes to stderr, exit 1). A first host failing prints no document, as elsewhere.
            if (json && forgotten.length > 0 && err instanceof CliError) {
              out.write(jsonText({ forgotten, failed: { hostId: h, message: err.message } }));
            }
            throw err;
          }
          forgotten.push(r.forgotten);
          if (!json)
            out.write(
              `forgot ${clean(r.forgotten.fingerprint)} for ${clean(r.forgotten.hostId)}; the next connection pins the key the host shows\n`,
            );
        }
        if (json) out.write(jsonText({ forgotten }));
        return 0;
      }
      throw new CliError(
        "usage: labfleet hosts keys|pubkey|forget-key|pin (-f workshop.yaml | NAME) [--host ID]",
        2,
      );
    }
    case "extend": {
      const hours = parseHours(args.values.hours);
      const r = await client.call<ExtendResult>("POST", `${path}/extend`, { hours });
      if (json) out.write(jsonText(r));
      else writeExtend(r, out);
      return r.ok ? 0 : 1;
    }
    case "open-access": {
      const close = args.values.close ?? false;
      const r = await client.call<OpenAccessView>("POST", `${path}/open-access`, { close });
      if (json) out.write(jsonText(r));
      // With bring-your-own groups, the message is what to open (or close) by hand.
      else out.write(`${clean(r.workshop)}: ${block(r.message)}\n`);
      return 0;
    }
    default:
      throw new CliError(`unknown command ${command}`, 2);
  }
}

interface HostKeys {
  hostId: string;
  origin: string;
  fingerprint: string;
  keys: { type: string; fingerprint: string }[];
  pinnedAt: string;
}

/** One row per trusted key: a host with several keys has a row for each. */
function writeHostKeys(keys: HostKeys[], out: Output): void {
  const rows = keys.flatMap((h) =>
    h.keys.map((k, i) => [
      i === 0 ? h.hostId : "",
      i === 0 ? h.origin : "",
      k.type,
      k.fingerprint,
      i === 0 ? clock(h.pinnedAt) : "",
    ]),
  );
  writeTable([["host", "origin", "type", "fingerprint", "pinned at"], ...rows], out);
}

const PIN_USAGE =
  'usage: labfleet hosts pin (-f workshop.yaml | NAME) --host ID (--key "ssh-ed25519 AAAA..." | --key-file PATH) [--replace]';

/**
 * The key lines of `hosts pin`: each --key, and the lines of --key-file (`-` for stdin) that are neither blank nor
 * comments (ssh-keyscan prints `# host:22 SSH-2.0-...` lines). The server checks each one.
 */
function keyLines(args: Args): string[] {
  const lines = [...(args.values.key ?? [])];
  const file = args.values["key-file"];
  if (file !== undefined) {
    let text: string;
    try {
      text = readFileSync(file === "-" ? 0 : file, "utf8");
    } catch (err) {
      throw new CliError(
        `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        2,
      );
    }
    const found = text.split(/\r?\n/).filter((l) => l.trim() !== "" && !l.trim().startsWith("#"));
    if (found.length === 0) throw new CliError(`${file} holds no host key line\n${PIN_USAGE}`, 2);
    lines.push(...found);
  }
  if (lines.length === 0)
    throw new CliError(`hosts pin needs the host's key: --key or --key-file\n${PIN_USAGE}`, 2);
  return lines;
}

const EXTEND_USAGE =
  "usage: labfleet extend (-f workshop.yaml | NAME) --hours N (N > 0, at most 168), e.g. labfleet extend my-workshop --hours 2";

function parseHours(text: string | undefined): number {
  if (text === undefined) throw new CliError(`extend needs --hours N\n${EXTEND_USAGE}`, 2);
  const hours = Number(text);
  if (text.trim() === "" || !Number.isFinite(hours) || hours <= 0 || hours > 168) {
    throw new CliError(
      `--hours must be a number greater than 0 and at most 168, got ${text}\n${EXTEND_USAGE}`,
      2,
    );
  }
  return hours;
}

function writeExtend(r: ExtendResult, out: Output): void {
  const part = (p: { result: string; detail?: string }, none: string) =>
    p.result === "error"
      ? paint(out, "failed", `error: ${p.detail ?? "failed"}`)
      : p.result === "none"
        ? none
        : clean(p.result);
  out.write(
    `${clean(r.workshop)}: teardown moved from ${clock(r.previousExpiry)} to ${clock(r.expiry)} (+${clean(r.hours)} h)\n`,
  );
  out.write(`teardown at: ${when(r.expiry)}\n`);
  out.write(`schedule mirror: ${part(r.schedule, "none (this runtime's scheduler reads the record)")}\n`);
  out.write(`provider expiry: ${part(r.provider, "none (this provider keeps no expiry)")}\n`);
  if (r.hosts.length > 0) {
    writeTable(
      [
        ["host", "power-off", "detail"],
        ...r.hosts.map((h) => [
          h.hostId,
          h.result === "error" ? paint(out, "failed", "error") : h.result,
          h.detail ?? "-",
        ]),
      ],
      out,
    );
  }
  if (!r.ok) {
    out.write(
      `some parts still end at ${clock(r.previousExpiry)}: fix the errors above and run extend again (every part is set to the schedule's new time)\n`,
    );
  }
}

function writeDoctor(reports: DoctorReport[], out: Output): void {
  const rows = reports.map((r) => {
    const failing = r.checks.filter((c) => !c.ok);
    return [
      r.host,
      r.ok ? paint(out, "ready", "pass") : paint(out, "failed", "FAIL"),
      failing.length ? failing.map((c) => c.name).join(", ") : "-",
    ];
  });
  writeTable([["host", "result", "failing checks"], ...rows], out);
  for (const r of reports.filter((x) => !x.ok)) {
    out.write(`\n${clean(r.host)}:\n`);
    for (const c of r.checks.filter((x) => !x.ok)) {
      out.write(
        `  ${clean(c.name)}: ${clean(c.detail)}${c.expected ? ` (expected ${clean(c.expected)})` : ""}\n`,
      );
    }
  }
  const passed = reports.filter((r) => r.ok).length;
  out.write(`\n${passed}/${reports.length} hosts pass\n`);
}

async function untar(gz: Buffer): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  const ex = extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on("entry", (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on("data", (c) => chunks.push(c as Buffer));
      stream.on("end", () => {
        if (header.type === "file" && !header.name.includes(".."))
          files.set(header.name, Buffer.concat(chunks));
        next();
      });
      stream.resume();
    });
    ex.on("finish", () => resolve());
    ex.on("error", reject);
  });
  ex.end(gunzipSync(gz));
  await done;
  return files;
}

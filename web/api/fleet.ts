import { Hono } from "hono";
import { z } from "zod";
import { ExtendInput, extendWorkshop } from "../../shared/fleet/extend.ts";
import { forgetHostKey, listHostKeys, sshPublicKey } from "../../shared/fleet/host-keys.ts";
import { parseLabels } from "../../shared/fleet/hosts.ts";
import {
  accessSheet,
  diagnose,
  doctor,
  refreshHosts,
  startDeploy,
  startRetry,
} from "../../shared/fleet/ops.ts";
import { runView } from "../../shared/fleet/workshops.ts";
import { tarGz } from "./archive.ts";

const Name = z.string().regex(/^[a-z0-9-]{1,40}$/, { error: "expected a workshop name" });
const Selection = {
  hosts: z.array(z.string().min(1)).max(256).optional(),
  labels: z.record(z.string(), z.string()).optional(),
  concurrency: z.number().int().min(1).max(64).optional(),
};
const SelectionBody = z.strictObject(Selection);
const DeployBody = z.strictObject({
  ...Selection,
  force: z.boolean().default(false),
  ref: z
    .string()
    .regex(/^[\w./-]{1,200}$/, { error: "expected a branch, tag or commit" })
    .optional(),
});
const RetryBody = z.strictObject({ ...Selection, allSelected: z.boolean().default(false) });

async function body(req: Request): Promise<unknown> {
  const text = await req.text();
  return text === "" ? {} : JSON.parse(text);
}

const sel = (b: { hosts?: string[] | undefined; labels?: Record<string, string> | undefined }) => ({
  ...(b.hosts ? { hosts: b.hosts } : {}),
  ...(b.labels ? { labels: b.labels } : {}),
});

/** Instructor routes for fleet operations: doctor, refresh, deploy, retry, diagnose, access, host keys, extend. */
export const fleet = new Hono()
  .post("/:name/doctor", async (c) => {
    const b = SelectionBody.parse(await body(c.req.raw));
    const reports = await doctor(Name.parse(c.req.param("name")), sel(b), b.concurrency);
    return c.json({ ok: reports.every((r) => r.ok), reports });
  })
  .post("/:name/refresh", async (c) => {
    const b = SelectionBody.parse(await body(c.req.raw));
    return c.json({ hosts: await refreshHosts(Name.parse(c.req.param("name")), sel(b), b.concurrency) });
  })
  .post("/:name/deploy", async (c) => {
    const b = DeployBody.parse(await body(c.req.raw));
    const run = await startDeploy(Name.parse(c.req.param("name")), sel(b), {
      force: b.force,
      ...(b.ref ? { ref: b.ref } : {}),
      ...(b.concurrency ? { concurrency: b.concurrency } : {}),
    });
    return c.json({ run: runView(run) }, 202);
  })
  .post("/:name/retry", async (c) => {
    const b = RetryBody.parse(await body(c.req.raw));
    const r = await startRetry(Name.parse(c.req.param("name")), sel(b), {
      allSelected: b.allSelected,
      ...(b.concurrency ? { concurrency: b.concurrency } : {}),
    });
    return r.run
      ? c.json({ run: runView(r.run), hosts: r.hosts }, 202)
      : c.json({ run: null, hosts: [] }, 200);
  })
  .post("/:name/diagnose", async (c) => {
    const b = RetryBody.parse(await body(c.req.raw));
    const d = await diagnose(Name.parse(c.req.param("name")), sel(b), {
      allSelected: b.allSelected,
      ...(b.concurrency ? { concurrency: b.concurrency } : {}),
    });
    const archive = await tarGz(d.name, d.files);
    c.header("Content-Type", "application/gzip");
    c.header("Content-Disposition", `attachment; filename="${d.name}.tar.gz"`);
    c.header("X-Labfleet-Diagnose-Name", d.name);
    return c.body(new Uint8Array(archive));
  })
  .get("/:name/access", async (c) => {
    const hosts = c.req.queries("host") ?? [];
    const labels = parseLabels(c.req.queries("label") ?? []);
    return c.json(
      await accessSheet(Name.parse(c.req.param("name")), { ...(hosts.length ? { hosts } : {}), labels }),
    );
  })
  .get("/:name/ssh-public-key", async (c) => {
    Name.parse(c.req.param("name"));
    return c.json({ publicKey: await sshPublicKey() });
  })
  .get("/:name/host-keys", async (c) => c.json({ keys: await listHostKeys(Name.parse(c.req.param("name"))) }))
  .delete("/:name/host-keys/:hostId", async (c) =>
    c.json({ forgotten: await forgetHostKey(Name.parse(c.req.param("name")), c.req.param("hostId")) }),
  )
  .post("/:name/extend", async (c) => {
    const name = Name.parse(c.req.param("name"));
    const b = ExtendInput.parse(await body(c.req.raw));
    return c.json(await extendWorkshop(name, b.hours));
  });

import { Hono } from "hono";
import { z } from "zod";
import { getRun, startRun } from "../../shared/fleet/runs.ts";
import {
  hostAccess,
  listWorkshops,
  planWorkshop,
  runView,
  submitWorkshop,
  workshopStatus,
} from "../../shared/fleet/workshops.ts";

const SubmitBody = z.strictObject({
  yaml: z
    .string()
    .min(1, { error: "expected the text of workshop.yaml" })
    .max(512 * 1024),
  baseDir: z.string().startsWith("/", { error: "expected an absolute folder" }).optional(),
});
const UpBody = z.strictObject({ force: z.boolean().default(false) });
const Name = z.string().regex(/^[a-z0-9-]{1,40}$/, { error: "expected a workshop name" });

async function jsonBody(req: Request): Promise<unknown> {
  const text = await req.text();
  return text === "" ? {} : JSON.parse(text);
}

/** Instructor routes for workshops: submit YAML, start up/teardown, read status and runs. */
export const workshops = new Hono()
  .get("/", async (c) => c.json({ workshops: await listWorkshops() }))
  .post("/", async (c) => {
    const body = SubmitBody.parse(await jsonBody(c.req.raw));
    const result = await submitWorkshop(body.yaml, body.baseDir);
    return c.json(result, result.created ? 201 : 200);
  })
  .post("/plan", async (c) => {
    const body = SubmitBody.parse(await jsonBody(c.req.raw));
    return c.json(await planWorkshop(body.yaml, body.baseDir));
  })
  .get("/:name", async (c) => c.json(await workshopStatus(Name.parse(c.req.param("name")))))
  .post("/:name/up", async (c) => {
    const body = UpBody.parse(await jsonBody(c.req.raw));
    const run = await startRun(Name.parse(c.req.param("name")), "up", { force: body.force });
    return c.json({ run: runView(run) }, 202);
  })
  .post("/:name/teardown", async (c) => {
    const run = await startRun(Name.parse(c.req.param("name")), "teardown");
    return c.json({ run: runView(run) }, 202);
  })
  .get("/:name/hosts/:hostId/access", async (c) => {
    const access = await hostAccess(Name.parse(c.req.param("name")), c.req.param("hostId"));
    return c.json({ access });
  })
  .get("/:name/runs/:runId", async (c) =>
    c.json({ run: runView(await getRun(Name.parse(c.req.param("name")), c.req.param("runId"))) }),
  );

import { Hono } from "hono";
import { z } from "zod";
import { listEvents } from "../../shared/fleet/events.ts";

const Name = z.string().regex(/^[a-z0-9-]{1,40}$/, { error: "expected a workshop name" });
const Query = z.strictObject({
  after: z
    .string()
    .regex(/^[0-9A-HJKMNP-TV-Z]{26}$/, { error: "expected an event id (a ULID)" })
    .optional(),
  limit: z.coerce
    .number({ error: "expected a number" })
    .int()
    .min(1, { error: "expected 1 to 500" })
    .max(500, { error: "expected 1 to 500" })
    .optional(),
});

/** A workshop's events, oldest first; poll with `?after=<last id>` for what happened since. */
export const events = new Hono().get("/:name/events", async (c) => {
  const { name } = z.object({ name: Name }).parse({ name: c.req.param("name") }); // a 400 naming `name`
  const q = Query.parse(c.req.query());
  return c.json(
    await listEvents(name, {
      ...(q.after ? { after: q.after } : {}),
      ...(q.limit ? { limit: q.limit } : {}),
    }),
  );
});

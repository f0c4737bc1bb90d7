import { createRoute, z } from "@hono/zod-openapi";
import { getReceipt } from "../../shared/fleet/receipt.ts";
import { apiRouter, errors, json, NameParams } from "./schemas.ts";

const Entry = z.object({
  kind: z.string().meta({
    description: "instance, volume, security-group, schedule, parameter, host-folder, process, portal, host",
  }),
  id: z
    .string()
    .meta({ description: "what names it: an id, a name, a folder or a pid", example: "i-0abc1234def567890" }),
  hostId: z.string().optional(),
  detail: z.string().optional(),
});
const Leftover = z
  .object({
    kind: z.string(),
    id: z.string(),
    hostId: z.string().optional(),
    why: z.string().meta({ description: "why it is still there" }),
    command: z.string().meta({
      description: "the shell command that removes it",
      example: "aws ec2 terminate-instances --region us-east-1 --instance-ids i-0abc1234def567890",
    }),
    foundBy: z.enum(["teardown", "sweeper"]),
    foundAt: z.string(),
    byHand: z.string().optional().meta({
      description:
        "the provider's own command, when `command` is `labfleet down NAME --yes` (after a failed teardown)",
    }),
  })
  .meta({ id: "ReceiptLeftover" });
const Usage = z
  .object({
    hosts: z.number().int(),
    hostHours: z.number().meta({
      description:
        "every host's hours since the last teardown: from its creation to the teardown, or to its removal for a host removed earlier",
    }),
    earlier: z
      .object({ hosts: z.number().int(), hostHours: z.number() })
      .optional()
      .meta({ description: "the hosts removed before the teardown (scale-down, replaced), included above" }),
    instanceType: z.string().optional(),
    pricePerHour: z.number().optional().meta({ description: "USD per host-hour on demand" }),
    costUsd: z.number().optional().meta({ description: "absent when labfleet knows no price for the type" }),
    basis: z.string().meta({ description: "how the cost was reached" }),
  })
  .meta({ id: "ReceiptUsage" });
export const ReceiptView = z
  .object({
    workshop: z.string(),
    runId: z.string(),
    provider: z.string(),
    region: z.string().optional(),
    endedAt: z.string(),
    checkedAt: z.string().meta({ description: "when labfleet last looked (the teardown, then the sweeper)" }),
    removed: z.array(Entry),
    left: z.array(Leftover),
    checkError: z.string().optional().meta({ description: "why the last look could not finish" }),
    failed: z
      .string()
      .optional()
      .meta({ description: "set when the teardown run failed: why; `left` is what it did not get to" }),
    usage: Usage,
  })
  .meta({ id: "Receipt" });

const receipt = createRoute({
  method: "get",
  path: "/{name}/receipt",
  tags: ["workshops"],
  operationId: "getReceipt",
  summary: "Read the teardown receipt",
  description:
    "The receipt of the workshop's last teardown: what was removed, what is left (why, and the command that removes it), and the host-hours used with their on-demand cost. The sweeper adds what it finds left later. 404 `receipt.not_found` for a workshop never torn down.",
  request: { params: NameParams },
  responses: {
    200: json(z.object({ receipt: ReceiptView }), "The receipt."),
    ...errors(400, 401, 404),
  },
});

/** The teardown receipt of a workshop. */
export const receiptApi = apiRouter().openapi(receipt, async (c) =>
  c.json({ receipt: await getReceipt(c.req.valid("param").name) }, 200),
);

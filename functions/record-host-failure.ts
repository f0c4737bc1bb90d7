import { z } from "zod";
import { recordHostsFailure } from "../shared/fleet/up.ts";
import { CaughtError, causeMessage, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "record-host-failure",
  z.object({ workshop: WorkshopName, hostIds: z.array(z.string().min(1)).min(1), error: CaughtError }),
  async (i) => {
    await recordHostsFailure(i.workshop, i.hostIds, causeMessage(i.error));
    return { hosts: i.hostIds.map((hostId) => ({ hostId, action: "failed" as const })) };
  },
);

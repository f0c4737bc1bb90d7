import { z } from "zod";
import { recordHostFailure } from "../shared/fleet/up.ts";
import { CaughtError, causeMessage, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "record-host-failure",
  z.object({ workshop: WorkshopName, hostId: z.string().min(1), error: CaughtError }),
  async (i) => {
    await recordHostFailure(i.workshop, i.hostId, causeMessage(i.error));
    return { hostId: i.hostId, action: "failed" as const };
  },
);

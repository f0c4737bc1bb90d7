import { z } from "zod";
import { deprovisionHosts } from "../shared/fleet/teardown.ts";
import { taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler("deprovision", z.object({ workshop: WorkshopName }), (i) =>
  deprovisionHosts(i.workshop),
);

import { z } from "zod";
import { provisionHosts } from "../shared/fleet/up.ts";
import { taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler("provision", z.object({ workshop: WorkshopName }), (i) =>
  provisionHosts(i.workshop),
);

// Writes schema/workshop.schema.json from the zod schema (`npm run schema`); a test fails when it drifts.
import { writeFileSync } from "node:fs";
import { workshopJsonSchema } from "../shared/workshop/json-schema.ts";

const file = new URL("../schema/workshop.schema.json", import.meta.url).pathname;
writeFileSync(file, `${JSON.stringify(workshopJsonSchema(), null, 2)}\n`);
console.log(`wrote ${file}`);

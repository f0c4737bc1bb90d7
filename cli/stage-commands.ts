import type { CheckReport } from "../shared/fleet/check.ts";
import { checkExitCode, checkSummary } from "../shared/fleet/check.ts";
import { parseStageList, resolveStages, type Stage } from "../shared/fleet/stages.ts";
import { isVisibleError } from "../shared/runtime/errors.ts";
import { type ApiClient, CliError } from "./client.ts";
import type { Args } from "./main.ts";
import { clean, jsonText, type Output, paint, writeTable } from "./render.ts";

/**
 * `--only`/`--skip` and `--check` on up, deploy and retry. Stage names are checked here, before anything is
 * submitted or started: an unknown one exits 1 naming the option and the allowed stages.
 */

export interface StageBody {
  only?: Stage[];
  skip?: Stage[];
}

export function stageBody(args: Args): StageBody {
  try {
    const body: StageBody = {
      ...(args.values.only !== undefined ? { only: parseStageList(args.values.only, "only") } : {}),
      ...(args.values.skip !== undefined ? { skip: parseStageList(args.values.skip, "skip") } : {}),
    };
    if (body.only || body.skip) resolveStages(body); // a selection that leaves no stage is refused here too
    return body;
  } catch (err) {
    if (isVisibleError(err)) throw new CliError(err.message, 1, err.details, err.code);
    throw err;
  }
}

/** Asks the API what the command would do (`POST /api/workshops/NAME/check`), prints it; exit 0, or 2 on changes. */
export async function runCheck(
  client: ApiClient,
  name: string,
  body: Record<string, unknown>,
  json: boolean,
  out: Output,
): Promise<number> {
  const report = await client.call<CheckReport>("POST", `/workshops/${encodeURIComponent(name)}/check`, body);
  if (json) out.write(jsonText(report));
  else writeCheck(report, out);
  return checkExitCode(report);
}

const ACTION_STYLE: Record<string, string> = {
  create: "deploying",
  rebuild: "deploying",
  promote: "deploying",
  reuse: "ready",
  skip: "pending",
};

export function writeCheck(report: CheckReport, out: Output): void {
  out.write(
    `check ${clean(report.workshop)} (${clean(report.command)}): ${checkSummary(report).text} · nothing was changed\n`,
  );
  if (report.items.length === 0) {
    out.write("no host to act on\n");
    return;
  }
  writeTable(
    [
      ["host", "stage", "action", "detail"],
      ...report.items.map((i) => [
        i.hostId,
        i.stage,
        paint(out, ACTION_STYLE[i.action] ?? "", i.action),
        i.detail ?? "",
      ]),
    ],
    out,
  );
}

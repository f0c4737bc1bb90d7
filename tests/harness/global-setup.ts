// The AWS SDK warns that Node 20 support ends in 2027; the tests know.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { type DynamoLocal, startDynamoLocal } from "../../cli/local/dynamodb.ts";
import { buildLambdas } from "../../scripts/build-lambdas.ts";

/**
 * One in-memory DynamoDB Local per test project (vitest.config.ts: the suite, then the tests that run alone);
 * each test file uses its own table.
 */
const started: { ddb: DynamoLocal; bundles: string }[] = [];

export async function setup(project: TestProject) {
  const bundles = mkdtempSync(join(tmpdir(), "labfleet-lambdas-"));
  // The Lambda bundles, built once per project as SST builds them, for the tests of the cloud path on the AWS double.
  const [ddb, build] = await Promise.all([startDynamoLocal(), buildLambdas({ outDir: bundles })]);
  started.push({ ddb, bundles });
  project.provide("dynamoEndpoint", ddb.endpoint);
  project.provide(
    "lambdaBuild",
    JSON.stringify({ outDir: build.outDir, target: build.target, functions: build.functions }),
  );
}

export async function teardown() {
  for (const { ddb, bundles } of started.splice(0)) {
    await ddb.stop();
    rmSync(bundles, { recursive: true, force: true });
  }
}

declare module "vitest" {
  export interface ProvidedContext {
    dynamoEndpoint: string;
    /** The LambdaBuild (scripts/build-lambdas.ts) of this run, as JSON: its bundles and functions. */
    lambdaBuild: string;
  }
}

// The AWS SDK warns that Node 20 support ends in 2027; the tests know.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

import type { TestProject } from "vitest/node";
import { type DynamoLocal, startDynamoLocal } from "../../cli/local/dynamodb.ts";

/** One in-memory DynamoDB Local for the whole run; each test file uses its own table. */
let ddb: DynamoLocal | undefined;

export async function setup(project: TestProject) {
  ddb = await startDynamoLocal();
  project.provide("dynamoEndpoint", ddb.endpoint);
}

export async function teardown() {
  await ddb?.stop();
}

declare module "vitest" {
  export interface ProvidedContext {
    dynamoEndpoint: string;
  }
}

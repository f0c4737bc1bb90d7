import { type AuthRequest, arn, type Call, type Operations, RawReply } from "./core.ts";

/**
 * DynamoDB in the AWS double: DynamoDB Local holds the data (it keeps DynamoDB's own contracts: conditions,
 * transactions, indexes, streams), and this proxy puts IAM in front of it. Each request is authorized as
 * DynamoDB authorizes it (see "Using IAM policy conditions for fine-grained access control" and "Actions defined
 * by Amazon DynamoDB"): the operation's action on the table (or `table/T/index/I`) ARN, TransactWriteItems and
 * TransactGetItems as the item actions they are made of, with `dynamodb:LeadingKeys` holding the partition key
 * values the request touches. Then the request goes to DynamoDB Local unchanged, signed with the test's own
 * credentials (DynamoDB Local keeps one database per access key and region), and its answer comes back as is.
 */

type Json = Record<string, unknown>;
type Attr = Record<string, unknown>;

export interface TableKeys {
  /** The table's partition key attribute, and each index's. */
  partitionKey: string;
  indexes: Record<string, string>;
}

export interface FakeDynamoDbOptions {
  /** DynamoDB Local's endpoint. */
  endpoint: string;
  /** The credentials DynamoDB Local's database is kept under (the test's own client's). */
  accessKeyId: string;
  region: string;
  /** The key attributes of the tables the code uses (one table: `pk`, index `gsi1` on `gsi1pk`). */
  tables: Record<string, TableKeys>;
}

const ITEM_ACTIONS = ["GetItem", "PutItem", "UpdateItem", "DeleteItem"] as const;

/** The string value of an attribute value (`{S: "x"}`, `{N: "1"}`, `{B: ".."}`). */
function scalar(v: unknown): string | undefined {
  const a = v as Attr | undefined;
  const x = a?.S ?? a?.N ?? a?.B;
  return typeof x === "string" ? x : undefined;
}

export class FakeDynamoDb {
  readonly operations: Operations;

  constructor(private readonly opts: FakeDynamoDbOptions) {
    const forward = (op: string) => async (input: Json, call: Call) => {
      await call.authorize(this.authRequests(op, input));
      return this.forward(op, input);
    };
    const ops = [
      ...ITEM_ACTIONS,
      "Query",
      "Scan",
      "BatchGetItem",
      "BatchWriteItem",
      "TransactWriteItems",
      "TransactGetItems",
      "DescribeTable",
      "DescribeTimeToLive",
      "ListTables",
    ];
    this.operations = Object.fromEntries(ops.map((op) => [op, forward(op)]));
  }

  private keysOf(table: string): TableKeys {
    const k = this.opts.tables[table];
    // A table nobody declared: DynamoDB Local answers ResourceNotFoundException itself.
    return k ?? { partitionKey: "pk", indexes: {} };
  }

  private leading(table: string, item: unknown): string[] {
    const v = scalar((item as Attr | undefined)?.[this.keysOf(table).partitionKey]);
    return v === undefined ? [] : [v];
  }

  /** The partition key value a Query's key condition names (`#pk = :pk`), on the table or the index. */
  private queryLeading(input: Json): string[] {
    const table = String(input.TableName);
    const keys = this.keysOf(table);
    const pk = input.IndexName ? keys.indexes[String(input.IndexName)] : keys.partitionKey;
    const names = (input.ExpressionAttributeNames ?? {}) as Record<string, string>;
    const values = (input.ExpressionAttributeValues ?? {}) as Record<string, unknown>;
    const expr = String(input.KeyConditionExpression ?? "");
    for (const m of expr.matchAll(/([#\w.]+)\s*=\s*(:\w+)/g)) {
      const name = (m[1] as string).startsWith("#") ? names[m[1] as string] : m[1];
      if (name === pk) {
        const v = scalar(values[m[2] as string]);
        return v === undefined ? [] : [v];
      }
    }
    return [];
  }

  private resourceOf(table: string, index?: unknown): string {
    return index ? `${arn.table(table)}/index/${String(index)}` : arn.table(table);
  }

  private req(action: string, table: string, leading: string[], index?: unknown): AuthRequest {
    return {
      action: `dynamodb:${action}`,
      resource: this.resourceOf(table, index),
      context: { "dynamodb:LeadingKeys": leading },
    };
  }

  /** What IAM is asked for one request, as DynamoDB asks it. */
  authRequests(op: string, input: Json): AuthRequest[] {
    const table = String(input.TableName ?? "");
    switch (op) {
      case "GetItem":
      case "DeleteItem":
      case "UpdateItem":
        return [this.req(op, table, this.leading(table, input.Key))];
      case "PutItem":
        return [this.req(op, table, this.leading(table, input.Item))];
      case "Query":
        return [this.req(op, table, this.queryLeading(input), input.IndexName)];
      case "Scan":
        return [{ action: "dynamodb:Scan", resource: this.resourceOf(table, input.IndexName) }];
      case "BatchGetItem":
        return Object.entries((input.RequestItems ?? {}) as Record<string, { Keys?: unknown[] }>).map(
          ([t, r]) =>
            this.req(
              op,
              t,
              (r.Keys ?? []).flatMap((k) => this.leading(t, k)),
            ),
        );
      case "BatchWriteItem":
        return Object.entries((input.RequestItems ?? {}) as Record<string, Json[]>).map(([t, writes]) =>
          this.req(
            op,
            t,
            writes.flatMap((w) =>
              this.leading(
                t,
                (w.PutRequest as Json | undefined)?.Item ?? (w.DeleteRequest as Json | undefined)?.Key,
              ),
            ),
          ),
        );
      case "TransactWriteItems":
        return ((input.TransactItems ?? []) as Json[]).map((item) => {
          const [kind, body] = Object.entries(item)[0] as [string, Json];
          const action = {
            Put: "PutItem",
            Update: "UpdateItem",
            Delete: "DeleteItem",
            ConditionCheck: "ConditionCheckItem",
          }[kind];
          const t = String(body.TableName);
          return this.req(action ?? kind, t, this.leading(t, body.Item ?? body.Key));
        });
      case "TransactGetItems":
        return ((input.TransactItems ?? []) as Json[]).map((item) => {
          const body = item.Get as Json;
          const t = String(body.TableName);
          return this.req("GetItem", t, this.leading(t, body.Key));
        });
      case "ListTables":
        return [{ action: "dynamodb:ListTables", resource: "*" }];
      default:
        return [{ action: `dynamodb:${op}`, resource: this.resourceOf(table) }];
    }
  }

  /** Sends the request to DynamoDB Local and hands its answer back unchanged. */
  async forward(op: string, input: Json, target = `DynamoDB_20120810.${op}`): Promise<RawReply> {
    const date = new Date().toISOString().replace(/[-:]/g, "").slice(0, 8);
    const res = await fetch(this.opts.endpoint, {
      method: "POST",
      headers: {
        "content-type": "application/x-amz-json-1.0",
        "x-amz-target": target,
        // DynamoDB Local reads the key id and region of the signature to pick its database; it checks no signature.
        authorization: `AWS4-HMAC-SHA256 Credential=${this.opts.accessKeyId}/${date}/${this.opts.region}/dynamodb/aws4_request, SignedHeaders=host, Signature=0`,
      },
      body: JSON.stringify(input),
    });
    const body = Buffer.from(await res.arrayBuffer());
    const headers: Record<string, string> = { "content-type": "application/x-amz-json-1.0" };
    const type = res.headers.get("x-amzn-errortype");
    if (type) headers["x-amzn-errortype"] = type;
    return new RawReply(res.status, headers, body);
  }

  /** A DynamoDB Streams call to DynamoDB Local (for the stream poller), its JSON answer. */
  async streams(op: string, input: Json): Promise<Json> {
    const reply = await this.forward(op, input, `DynamoDBStreams_20120810.${op}`);
    const out = JSON.parse(reply.body.toString()) as Json;
    if (reply.status !== 200) throw new Error(`DynamoDB Local streams ${op}: ${JSON.stringify(out)}`);
    return out;
  }
}

// An ACP client that botd does not ship: the TypeScript SDK's client app
// (@agentclientprotocol/sdk, installed by the tests' npm fixture), driving the agent
// command given after `--`. The Python test steers it with one JSON object a line on stdin:
//   {"op": "request", "id": N, "method": M, "params": P}  -> {"id": N, "result"|"error": ...}
//   {"op": "notify", "method": M, "params": P}
//   {"op": "answer", "ask": N, "response": R}             (answers permission request N)
//   {"op": "close"}                                       (closes the agent's stdin)
// and reads what happens as lines on stdout: {"update": params} for each session/update,
// {"ask": N, "params": P} for each session/request_permission, {"exit": code} at the end.
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import { client, ndJsonStream } from "@agentclientprotocol/sdk";

const command = process.argv.slice(process.argv.indexOf("--") + 1);
const agent = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const say = (object) => process.stdout.write(JSON.stringify(object) + "\n");

const asks = new Map();
let asked = 0;
const app = client({ name: "botd-tests" })
  .onNotification("session/update", (context) => say({ update: context.params }))
  .onRequest("session/request_permission", (context) => {
    asked += 1;
    say({ ask: asked, params: context.params });
    return new Promise((resolve) => asks.set(asked, resolve));
  });

const stream = ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
const exited = new Promise((resolve) => agent.on("exit", (code) => resolve(code)));

try {
await app.connectWith(stream, async (ctx) => {
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    const order = JSON.parse(line);
    if (order.op === "request") {
      ctx.request(order.method, order.params).then(
        (result) => say({ id: order.id, result: result ?? null }),
        (error) => say({ id: order.id, error: { code: error.code, message: error.message, data: error.data ?? null } }),
      );
    } else if (order.op === "notify") {
      await ctx.notify(order.method, order.params);
    } else if (order.op === "answer") {
      asks.get(order.ask)(order.response);
    } else if (order.op === "close") {
      agent.stdin.end();
      process.stdin.destroy();
      break;
    }
  }
  await exited;
});
} catch (error) {
  if (!String(error).includes("connection closed")) throw error;
}
say({ exit: await exited });

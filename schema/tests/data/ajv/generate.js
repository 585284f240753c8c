// Regenerates strict.jsonl: each schema of cases.jsonl compiled as the Hub
// compiles output.schema (ajv 8.20.0, `new Ajv({allErrors: true, strict:
// true})`, src/workflows/json-schema.ts), with ajv's verdict and message.
//
//   npm install ajv@8.20.0   (in a scratch folder)
//   NODE_PATH=<scratch>/node_modules node generate.js < cases.jsonl > strict.jsonl
const Ajv = require("ajv").default;
const lines = require("fs").readFileSync(0, "utf8").split("\n").filter((l) => l.trim());
for (const line of lines) {
  const schema = JSON.parse(line);
  let out;
  try {
    new Ajv({ allErrors: true, strict: true }).compile(structuredClone(schema));
    out = { ok: true };
  } catch (e) {
    out = { ok: false, message: String(e.message) };
  }
  console.log(JSON.stringify({ schema, ...out }));
}

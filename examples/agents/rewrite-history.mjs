// An agent that rewrites its history (OpenAI Chat Completions): after the
// first answer it runs the tool, then calls again with the earlier turns
// replaced by a one-line summary.
import OpenAI from 'openai';
import { readTask, model, system, calculatorDescription, calculatorSchema, runTool, finish } from './lib.mjs';

const task = await readTask();
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const tools = [{ type: 'function', function: { name: 'calculator', description: calculatorDescription, parameters: calculatorSchema } }];

const first = await client.chat.completions.create({
  model, tools,
  messages: [{ role: 'system', content: system }, { role: 'user', content: task.question }],
});
const msg = first.choices[0].message;
let summary = `Question: ${task.question}`;
for (const c of msg.tool_calls ?? []) {
  summary += ` The calculator gave ${runTool(c.function.name, c.function.arguments)} for ${c.function.arguments}.`;
}
const second = await client.chat.completions.create({
  model,
  messages: [{ role: 'system', content: system }, { role: 'user', content: `${summary} Answer with the number.` }],
});
finish(task, second.choices[0].message.content ?? '');

// An agent on the OpenAI SDK's Chat Completions: a calculator tool, at
// most 4 model calls, streamed (TRAJFLOW_STREAM=0: not).
import OpenAI from 'openai';
import { readTask, model, stream, maxCalls, system, calculatorDescription, calculatorSchema, runTool, finish } from './lib.mjs';

const task = await readTask();
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const tools = [{ type: 'function', function: { name: 'calculator', description: calculatorDescription, parameters: calculatorSchema } }];
const messages = [
  { role: 'system', content: system },
  { role: 'user', content: task.question },
];

let answer = '';
for (let i = 0; i < maxCalls; i++) {
  let content = '';
  let calls = [];
  if (stream) {
    const chunks = await client.chat.completions.create({ model, messages, tools, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of chunks) {
      const delta = chunk.choices[0]?.delta;
      if (!delta) continue;
      if (delta.content) content += delta.content;
      for (const tc of delta.tool_calls ?? []) {
        const c = (calls[tc.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (tc.id) c.id = tc.id;
        if (tc.function?.name) c.function.name += tc.function.name;
        if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
      }
    }
  } else {
    const res = await client.chat.completions.create({ model, messages, tools });
    content = res.choices[0].message.content ?? '';
    calls = res.choices[0].message.tool_calls ?? [];
  }
  messages.push({ role: 'assistant', content: content || null, ...(calls.length ? { tool_calls: calls } : {}) });
  answer = content;
  if (!calls.length) break;
  for (const c of calls) {
    messages.push({ role: 'tool', tool_call_id: c.id, content: runTool(c.function.name, c.function.arguments) });
  }
}
finish(task, answer);

// An agent on the OpenAI SDK's Responses API: a calculator tool, at most
// 4 model calls, the whole conversation sent each time (no
// previous_response_id), streamed (TRAJFLOW_STREAM=0: not).
import OpenAI from 'openai';
import { readTask, model, stream, maxCalls, system, calculatorDescription, calculatorSchema, runTool, finish } from './lib.mjs';

const task = await readTask();
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const tools = [{ type: 'function', name: 'calculator', description: calculatorDescription, parameters: calculatorSchema, strict: true }];
const input = [{ role: 'user', content: task.question }];

let answer = '';
for (let i = 0; i < maxCalls; i++) {
  const params = { model, instructions: system, input, tools, store: false };
  let response;
  if (stream) {
    const events = await client.responses.create({ ...params, stream: true });
    let text = '';
    for await (const ev of events) {
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') response = ev.response;
    }
    if (!response) throw new Error('the stream ended without response.completed');
    if (text !== response.output_text && response.output_text !== undefined) {
      throw new Error(`streamed text ${JSON.stringify(text)} is not the response's ${JSON.stringify(response.output_text)}`);
    }
  } else {
    response = await client.responses.create(params);
  }
  input.push(...response.output);
  const calls = response.output.filter((item) => item.type === 'function_call');
  answer = response.output_text ?? response.output.filter((it) => it.type === 'message').flatMap((it) => it.content).map((p) => p.text ?? '').join('');
  if (!calls.length) break;
  for (const c of calls) {
    input.push({ type: 'function_call_output', call_id: c.call_id, output: runTool(c.name, c.arguments) });
  }
}
finish(task, answer);

// An agent on the Anthropic SDK's Messages API: a calculator tool, at
// most 4 model calls, streamed (TRAJFLOW_STREAM=0: not).
import Anthropic from '@anthropic-ai/sdk';
import { readTask, model, stream, maxCalls, system, calculatorDescription, calculatorSchema, runTool, finish } from './lib.mjs';

const task = await readTask();
const client = new Anthropic({ baseURL: process.env.ANTHROPIC_BASE_URL, apiKey: process.env.ANTHROPIC_API_KEY });
const tools = [{ name: 'calculator', description: calculatorDescription, input_schema: calculatorSchema }];
const messages = [{ role: 'user', content: task.question }];

let answer = '';
for (let i = 0; i < maxCalls; i++) {
  const params = { model, max_tokens: 1024, system, messages, tools };
  const message = stream ? await client.messages.stream(params).finalMessage() : await client.messages.create(params);
  messages.push({ role: 'assistant', content: message.content });
  answer = message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const uses = message.content.filter((b) => b.type === 'tool_use');
  if (!uses.length) break;
  messages.push({
    role: 'user',
    content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: runTool(u.name, u.input) })),
  });
}
finish(task, answer);

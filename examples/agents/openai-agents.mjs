// An agent on the OpenAI Agents SDK: an Agent with a calculator function
// tool, run by run() with at most 4 turns, streamed (TRAJFLOW_STREAM=0:
// not), over the Responses API (TRAJFLOW_OPENAI_API=chat_completions:
// over Chat Completions).
import OpenAI from 'openai';
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';
import { readTask, model, stream, maxCalls, system, calculatorDescription, calculatorSchema, calculate, finish } from './lib.mjs';

setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY }));
if (process.env.TRAJFLOW_OPENAI_API === 'chat_completions') setOpenAIAPI('chat_completions');

const task = await readTask();
const calculator = tool({
  name: 'calculator',
  description: calculatorDescription,
  parameters: calculatorSchema,
  strict: true,
  execute: async ({ expression }) => calculate(expression),
});
const agent = new Agent({ name: 'solver', instructions: system, model, tools: [calculator] });

// A model that still calls tools on its last turn ends the run with
// MaxTurnsExceededError; the answer is then, as in the other agents, the
// text of the last model response (its tool calls go unanswered).
const errorHandlers = {
  maxTurns: ({ runData }) => {
    const last = runData.rawResponses.at(-1);
    const text = (last?.output ?? [])
      .filter((it) => it.type === 'message')
      .flatMap((it) => it.content)
      .map((p) => (p.type === 'output_text' ? p.text : ''))
      .join('');
    return { finalOutput: text, includeInHistory: false };
  },
};

let answer;
if (stream) {
  const result = await run(agent, task.question, { maxTurns: maxCalls, stream: true, errorHandlers });
  for await (const _ of result) { /* events */ }
  await result.completed;
  answer = result.finalOutput;
} else {
  const result = await run(agent, task.question, { maxTurns: maxCalls, errorHandlers });
  answer = result.finalOutput;
}
finish(task, answer ?? '');

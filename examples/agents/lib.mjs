// Shared by the example agents: the task on stdin, the calculator tool,
// and the last stdout line trajflow reads the reward from.

// readTask reads the task row (one JSON object) from stdin.
export async function readTask() {
  let text = '';
  for await (const chunk of process.stdin) text += chunk;
  return JSON.parse(text);
}

export const model = process.env.TRAJFLOW_MODEL || 'policy';

// stream is whether the agent streams its calls (TRAJFLOW_STREAM=0 turns it off).
export const stream = process.env.TRAJFLOW_STREAM !== '0';

export const maxCalls = 4;

export const system = 'You solve arithmetic questions. Use the calculator tool, then answer with the number.';

export const calculatorDescription = 'Evaluates an arithmetic expression (digits, + - * / ( ) . and spaces).';

export const calculatorSchema = {
  type: 'object',
  properties: { expression: { type: 'string', description: 'the expression, e.g. 17 * 3' } },
  required: ['expression'],
  additionalProperties: false,
};

// calculate evaluates an arithmetic expression without eval: only digits,
// + - * / ( ) . and spaces; anything else is an error string.
export function calculate(expression) {
  if (typeof expression !== 'string' || !/^[0-9+\-*/(). ]+$/.test(expression)) {
    return 'error: only digits, + - * / ( ) . and spaces are allowed';
  }
  const tokens = expression.match(/\d+(\.\d+)?|\.\d+|[+\-*/()]/g) || [];
  let i = 0;
  const peek = () => tokens[i];
  const next = () => tokens[i++];
  function primary() {
    const t = next();
    if (t === '(') {
      const v = sum();
      if (next() !== ')') throw new Error('missing )');
      return v;
    }
    if (t === '-') return -primary();
    if (t === '+') return primary();
    if (t === undefined || !/^[\d.]/.test(t)) throw new Error(`unexpected ${t ?? 'end'}`);
    return Number(t);
  }
  function product() {
    let v = primary();
    while (peek() === '*' || peek() === '/') v = next() === '*' ? v * primary() : v / primary();
    return v;
  }
  function sum() {
    let v = product();
    while (peek() === '+' || peek() === '-') v = next() === '+' ? v + product() : v - product();
    return v;
  }
  try {
    const v = sum();
    if (i !== tokens.length) throw new Error(`unexpected ${tokens[i]}`);
    return String(v);
  } catch (e) {
    return `error: ${e.message}`;
  }
}

// runTool runs a tool call: its name and JSON arguments (a string or an object).
export function runTool(name, args) {
  if (name !== 'calculator') return `error: no tool ${name}`;
  try {
    const a = typeof args === 'string' ? JSON.parse(args || '{}') : args;
    return calculate(a.expression);
  } catch {
    return 'error: the arguments are not JSON';
  }
}

// finish prints the last stdout line: the reward (1 when the answer
// holds the expected answer) and the answer.
export function finish(task, answer) {
  const expected = String(task.expected_answer ?? '');
  const reward = expected !== '' && String(answer).includes(expected) ? 1 : 0;
  console.log(JSON.stringify({ reward, answer: String(answer) }));
}

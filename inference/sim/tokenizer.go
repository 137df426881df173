package sim

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/trajflow/trajflow/pipeline"
)

// Special token ids of the toy tokenizer. Ids 0..255 are raw bytes (the
// fallback for text outside the vocabulary); the vocabulary's pieces follow
// the specials.
const (
	TokSystem    int32 = 256 // start of a system (or developer) message
	TokUser      int32 = 257 // start of a user message
	TokAssistant int32 = 258 // start of an assistant message
	TokTool      int32 = 259 // start of a tool message
	TokEnd       int32 = 260 // end of a message (the end-of-sequence token)
	firstPiece   int32 = 261
)

var specialText = map[int32]string{
	TokSystem: "<|system|>", TokUser: "<|user|>", TokAssistant: "<|assistant|>",
	TokTool: "<|tool|>", TokEnd: "<|end|>",
}

// commonWords are real words in the vocabulary, so the text the simulator
// writes ("The answer is \boxed{7}") tokenizes to one id per word.
var commonWords = strings.Fields(`the The a an and or of to in is it that this
for on with as be by are was at from not we I you me let Let think step so
Step First then Then answer Answer boxed What what plus minus times divided
call tool function result Now now check Check done`)

type vocabulary struct {
	pieces []string         // id - firstPiece → piece
	ids    map[string]int32 // piece → id
	words  []int32          // ids of " word" filler pieces
}

var (
	vocabOnce sync.Once
	vocab     *vocabulary
)

func theVocab() *vocabulary {
	vocabOnce.Do(func() {
		v := &vocabulary{ids: map[string]int32{}}
		add := func(p string) int32 {
			if id, ok := v.ids[p]; ok {
				return id
			}
			id := firstPiece + int32(len(v.pieces))
			v.pieces = append(v.pieces, p)
			v.ids[p] = id
			return id
		}
		for _, w := range commonWords {
			add(w)
			add(" " + w)
		}
		const cons, vows = "bcdfghjklmnprstvz", "aeiou"
		for _, c1 := range cons {
			for _, v1 := range vows {
				for _, c2 := range cons {
					for _, v2 := range vows {
						w := string([]rune{c1, v1, c2, v2})
						add(w)
						v.words = append(v.words, add(" "+w))
					}
				}
			}
		}
		for c := byte(0x21); c < 0x7f; c++ {
			if !isLetter(c) {
				add(string(c))
				add(" " + string(c))
			}
		}
		add(" ")
		add("\n")
		add("\t")
		vocab = v
	})
	return vocab
}

// tokNewline is the id of "\n", which follows every message's end id.
func tokNewline() int32 { return theVocab().ids["\n"] }

// VocabSize is the number of token ids the toy tokenizer uses.
func VocabSize() int { return int(firstPiece) + len(theVocab().pieces) }

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isSpace(c byte) bool  { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// fillerWords is n filler words drawn by draw(i) (space-separated, the
// first without its space) and their ids: Tokenize of the text.
func fillerWords(n int, draw func(i int) uint64) (string, []int32) {
	v := theVocab()
	var b strings.Builder
	ids := make([]int32, 0, n)
	for i := range n {
		id := v.words[draw(i)%uint64(len(v.words))]
		w := v.pieces[id-firstPiece]
		if i == 0 {
			w = w[1:]
			id = v.ids[w]
		}
		b.WriteString(w)
		ids = append(ids, id)
	}
	return b.String(), ids
}

// tokenizeAround is Tokenize(prefix + filler + suffix) for filler words
// already tokenized (fillerWords) between a prefix that ends in neither a
// letter nor a space and any suffix: a letter run ends where the filler
// ends, so no piece crosses either edge.
func tokenizeAround(prefix string, filler []int32, suffix string) []int32 {
	ids := appendTokens(make([]int32, 0, len(filler)+8), prefix)
	ids = append(ids, filler...)
	return appendTokens(ids, suffix)
}

// Tokenize splits text into the toy tokenizer's ids. Pieces are an optional
// leading space plus a run of ASCII letters, a digit, or one other
// character; pieces outside the vocabulary fall back to their bytes. It is
// lossless: Detokenize(Tokenize(s)) == s for every s.
func Tokenize(s string) []int32 {
	return appendTokens(nil, s)
}

func appendTokens(out []int32, s string) []int32 {
	v := theVocab()
	for i := 0; i < len(s); {
		start := i
		if s[i] == ' ' && i+1 < len(s) && !isSpace(s[i+1]) {
			i++
		}
		switch c := s[i]; {
		case isLetter(c):
			for i < len(s) && isLetter(s[i]) {
				i++
			}
		case isDigit(c) || isSpace(c):
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
		piece := s[start:i]
		if id, ok := v.ids[piece]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(piece); j++ {
			out = append(out, int32(piece[j]))
		}
	}
	return out
}

// Detokenize turns ids back into text. Special ids render as their names
// ("<|end|>") unless skipSpecial; unknown ids render as nothing.
func Detokenize(ids []int32, skipSpecial bool) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(tokenText(id, skipSpecial))
	}
	return b.String()
}

func tokenText(id int32, skipSpecial bool) string {
	v := theVocab()
	switch {
	case id >= 0 && id < 256:
		return string([]byte{byte(id)})
	case id < firstPiece:
		if skipSpecial {
			return ""
		}
		return specialText[id]
	case int(id-firstPiece) < len(v.pieces):
		return v.pieces[id-firstPiece]
	}
	return ""
}

func roleToken(role string) int32 {
	switch role {
	case pipeline.RoleSystem, "developer":
		return TokSystem
	case pipeline.RoleAssistant:
		return TokAssistant
	case pipeline.RoleTool:
		return TokTool
	}
	return TokUser
}

// messageText is the text a message renders to: its content and, for an
// assistant message, its tool calls.
func messageText(m *pipeline.Message) string {
	content := m.Content
	if m.HasImages() {
		content = partsText(m.Parts)
	}
	if len(m.ToolCalls) == 0 {
		return content
	}
	var b strings.Builder
	b.WriteString(content)
	for _, tc := range m.ToolCalls {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(toolCallText(tc.Name, tc.Arguments))
	}
	return b.String()
}

// partsText is how the simulator's template renders a message with
// images: its parts in order, joined with "\n", each image as a marker
// naming what the simulator sees of it (ImageMarker).
func partsText(parts []pipeline.ContentPart) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Type == pipeline.PartImage {
			b.WriteString(ImageMarker(p.ImageURL))
		} else {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// ImageMarker is the text the simulator's template renders an image part
// as (its "vision tokens"): "<image MIME N bytes sha256:HEX12>" for a data
// URL, "<image URL>" for an http(s) URL (the simulator fetches nothing).
func ImageMarker(u string) string {
	if mime, data, err := pipeline.ParseDataURL(u); err == nil {
		sum := sha256.Sum256(data)
		return fmt.Sprintf("<image %s %d bytes sha256:%x>", mime, len(data), sum[:6])
	}
	return "<image " + u + ">"
}

// ImageSize is what the simulator sees of an image: a data URL's decoded
// byte length, or an http(s) URL's length in bytes.
func ImageSize(u string) int {
	if _, data, err := pipeline.ParseDataURL(u); err == nil {
		return len(data)
	}
	return len(u)
}

func toolCallText(name, args string) string {
	return `<tool_call>{"name": "` + name + `", "arguments": ` + args + `}</tool_call>`
}

// RenderChat renders messages into prompt ids: per message its role's start
// id, the content's ids, the end id and a newline; the prompt ends with the
// assistant start id.
func RenderChat(msgs []pipeline.Message) []int32 {
	return Template{}.Render(msgs, nil, true)
}

// Template is the simulator's chat template.
type Template struct {
	// StripReasoning drops "<think>…</think>" (everything up to the last
	// "</think>", and the newlines after it) from the content of assistant
	// messages before the last user message, as Qwen3's template does.
	StripReasoning bool
	// NoThinking is Qwen3's enable_thinking: false (a chat_template_kwargs
	// key): the generation prompt ends with an empty think block,
	// "<think>\n\n</think>\n\n".
	NoThinking bool
}

// emptyThink is the empty think block NoThinking puts after the
// generation prompt's assistant start id.
const emptyThink = thinkOpen + "\n\n" + thinkClose + "\n\n"

// TemplateFor returns the template with the chat_template_kwargs kwargs
// applied: enable_thinking: false sets NoThinking. Other keys are
// ignored, as a Jinja template ignores variables it does not use.
func (t Template) TemplateFor(kwargs any) Template {
	if m, ok := kwargs.(map[string]any); ok {
		if v, ok := m["enable_thinking"].(bool); ok && !v {
			t.NoThinking = true
		}
	}
	return t
}

// toolsOpen starts the block that renders tool definitions.
const toolsOpen = "<tools>"

// Render renders messages into ids: first, when tools are given, a system
// block "<tools>" + the definitions as a JSON list; then per message its
// role's start id, its text's ids, the end id and a newline (as ChatML
// closes every message with "<|im_end|>\n": the model generates the end
// id, never the newline); and with addGenerationPrompt the assistant start
// id, followed by an empty think block when NoThinking.
func (t Template) Render(msgs []pipeline.Message, tools []json.RawMessage, addGenerationPrompt bool) []int32 {
	var out []int32
	if len(tools) > 0 {
		list, _ := json.Marshal(tools)
		out = append(out, TokSystem)
		out = appendTokens(out, toolsOpen+string(list))
		out = append(out, TokEnd, tokNewline())
	}
	lastUser := -1
	if t.StripReasoning {
		for i := range msgs {
			if msgs[i].Role == pipeline.RoleUser {
				lastUser = i
			}
		}
	}
	for i := range msgs {
		m := &msgs[i]
		out = append(out, roleToken(m.Role))
		if i < lastUser && m.Role == pipeline.RoleAssistant && strings.Contains(m.Content, thinkClose) {
			c := *m
			c.Content = StripThink(c.Content)
			m = &c
		}
		out = appendTokens(out, messageText(m))
		out = append(out, TokEnd, tokNewline())
	}
	if addGenerationPrompt {
		out = append(out, TokAssistant)
		if t.NoThinking {
			out = appendTokens(out, emptyThink)
		}
	}
	return out
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// StripThink returns content after its last "</think>", without the
// newlines that follow it (Qwen3's template:
// content.split('</think>')[-1].lstrip('\n')).
func StripThink(content string) string {
	i := strings.LastIndex(content, thinkClose)
	if i < 0 {
		return content
	}
	return strings.TrimLeft(content[i+len(thinkClose):], "\n")
}

// parseRendered splits prompt ids rendered by a Template back into
// messages (assistant tool calls stay in the content's text) and the tool
// definitions; a trailing role start id without its end (the generation
// prompt) is dropped.
func parseRendered(ids []int32) (msgs []pipeline.Message, tools []json.RawMessage) {
	role, start := "", -1
	for i, id := range ids {
		switch {
		case id >= TokSystem && id <= TokTool:
			role, start = roleName(id), i+1
		case id == TokEnd && start >= 0:
			text := Detokenize(ids[start:i], false)
			start = -1
			if role == pipeline.RoleSystem && len(msgs) == 0 && tools == nil && strings.HasPrefix(text, toolsOpen) {
				if json.Unmarshal([]byte(text[len(toolsOpen):]), &tools) == nil {
					continue
				}
				tools = nil
			}
			msgs = append(msgs, pipeline.Message{Role: role, Content: text})
		}
	}
	return msgs, tools
}

func roleName(id int32) string {
	switch id {
	case TokSystem:
		return pipeline.RoleSystem
	case TokAssistant:
		return pipeline.RoleAssistant
	case TokTool:
		return pipeline.RoleTool
	}
	return pipeline.RoleUser
}

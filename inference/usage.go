package inference

// Usage counts the tokens of replies a decorator threw away (a reply
// that failed the structured-output check, then sent again) and the tries
// they took.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	Tries            int
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.PromptTokens + v.PromptTokens, u.CompletionTokens + v.CompletionTokens, u.Tries + v.Tries}
}

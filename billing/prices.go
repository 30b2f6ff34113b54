package billing

import "strings"

// TokenUsage is what one model call used, as the model reports it.
type TokenUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

// Add returns u + v.
func (u TokenUsage) Add(v TokenUsage) TokenUsage {
	return TokenUsage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens,
		u.CacheReadInputTokens + v.CacheReadInputTokens, u.CacheCreationInputTokens + v.CacheCreationInputTokens}
}

// Price is a model's price in microdollars per million tokens of each kind.
type Price struct {
	Input         int64 `json:"input"`
	Output        int64 `json:"output"`
	CacheRead     int64 `json:"cache_read"`
	CacheCreation int64 `json:"cache_creation"`
}

// Cost is u at price p in microdollars, rounded up so the platform never undercharges.
func (p Price) Cost(u TokenUsage) int64 {
	total := u.InputTokens*p.Input + u.OutputTokens*p.Output + u.CacheReadInputTokens*p.CacheRead +
		u.CacheCreationInputTokens*p.CacheCreation
	return (total + 999_999) / 1_000_000
}

// MaxInput is the highest per-token price of any input kind: the worst case for tokens not yet counted.
func (p Price) MaxInput() int64 { return max(p.Input, p.CacheRead, p.CacheCreation) }

// Prices maps model names (or name prefixes) to prices. Lookup picks the longest matching prefix, else
// Default.
type Prices struct {
	Models  map[string]Price
	Default Price
}

// Lookup returns the price of model.
func (ps Prices) Lookup(model string) Price {
	best, bestLen := ps.Default, -1
	for name, p := range ps.Models {
		if strings.HasPrefix(model, name) && len(name) > bestLen {
			best, bestLen = p, len(name)
		}
	}
	return best
}

// DefaultPrices is the built-in price table (USD list prices per million tokens, in microdollars); the
// billing API overrides it per model.
func DefaultPrices() Prices {
	sonnet := Price{Input: 3_000_000, Output: 15_000_000, CacheRead: 300_000, CacheCreation: 3_750_000}
	return Prices{
		Default: sonnet,
		Models: map[string]Price{
			"claude-opus":      {Input: 15_000_000, Output: 75_000_000, CacheRead: 1_500_000, CacheCreation: 18_750_000},
			"claude-opus-4-5":  {Input: 5_000_000, Output: 25_000_000, CacheRead: 500_000, CacheCreation: 6_250_000},
			"claude-sonnet":    sonnet,
			"claude-3-5-haiku": {Input: 800_000, Output: 4_000_000, CacheRead: 80_000, CacheCreation: 1_000_000},
			"claude-haiku-4-5": {Input: 1_000_000, Output: 5_000_000, CacheRead: 100_000, CacheCreation: 1_250_000},
			"claude-3-haiku":   {Input: 250_000, Output: 1_250_000, CacheRead: 30_000, CacheCreation: 300_000},
		},
	}
}

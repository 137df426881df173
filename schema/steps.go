package schema

import (
	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
)

// StepsVersion is the version of the step table's schema (the files of
// the steps directory, output.steps). It changes whenever a step column is
// added, removed, renamed or changes type, and is written into every steps
// file's key-value metadata under StepsMetadataKey.
const StepsVersion = "2"

// StepsMetadataKey is the key-value metadata key holding a steps file's
// schema version.
const StepsMetadataKey = "trajflow.steps_schema_version"

var stepSchema = arrow.NewSchema(fields(stepColumns), nil)

// StepSchema returns the step table's schema: one row per step of a kept
// trajectory. Only anchor_obs and anchor_group_id (null: the environment
// gave no anchor) and raw_prompt (null: whole-chat requests) are
// nullable. The returned schema is shared; do not
// modify it.
func StepSchema() *arrow.Schema { return stepSchema }

// CheckSteps reports whether s is the step table's schema of the current
// StepsVersion, naming the first column that differs.
func CheckSteps(s *arrow.Schema) error { return check(s, stepSchema, "steps "+StepsVersion) }

// StepRow is one decoded row of the step table.
type StepRow struct {
	RunID            string
	TaskIndex        int64
	Attempt          int32
	RolloutIndex     int32
	GroupID          string
	TrajID           string
	Step             int32
	StepReward       float64
	EpisodeReward    float64
	EpisodeLength    int32
	IsActionValid    bool
	AnchorObs        *string
	AnchorGroupID    *string
	AnchorGroupSize  int32
	AnchorReturnMean float64
	AnchorReturnStd  float64
	StepReturn       float64
	StepAdvantage    float64
	EpisodeAdvantage float64
	JointAdvantage   float64
	RawPrompt        *string
	PromptTokenIDs   []int32
	ResponseTokenIDs []int32
	LossMask         []int8
	ResponseLogprobs []float32
}

// StepRows decodes a record of the step table (CheckSteps). The slices
// are copies: they outlive the record.
func StepRows(rec arrow.Record) ([]StepRow, error) {
	if err := CheckSteps(rec.Schema()); err != nil {
		return nil, err
	}
	col := func(i int) arrow.Array { return rec.Column(i) }
	str := func(i, row int) string { return col(i).(*array.String).Value(row) }
	optStr := func(i, row int) *string {
		if col(i).IsNull(row) {
			return nil
		}
		s := str(i, row)
		return &s
	}
	i32 := func(i, row int) int32 { return col(i).(*array.Int32).Value(row) }
	f64 := func(i, row int) float64 { return col(i).(*array.Float64).Value(row) }
	out := make([]StepRow, rec.NumRows())
	for r := range out {
		out[r] = StepRow{
			RunID: str(0, r), TaskIndex: col(1).(*array.Int64).Value(r), Attempt: i32(2, r), RolloutIndex: i32(3, r),
			GroupID: str(4, r), TrajID: str(5, r), Step: i32(6, r),
			StepReward: f64(7, r), EpisodeReward: f64(8, r), EpisodeLength: i32(9, r),
			IsActionValid: col(10).(*array.Boolean).Value(r), AnchorObs: optStr(11, r), AnchorGroupID: optStr(12, r),
			AnchorGroupSize: i32(13, r), AnchorReturnMean: f64(14, r), AnchorReturnStd: f64(15, r),
			StepReturn: f64(16, r), StepAdvantage: f64(17, r),
			EpisodeAdvantage: f64(18, r), JointAdvantage: f64(19, r), RawPrompt: optStr(20, r),
			PromptTokenIDs:   listValues[int32](col(21), r),
			ResponseTokenIDs: listValues[int32](col(22), r),
			LossMask:         listValues[int8](col(23), r),
			ResponseLogprobs: listValues[float32](col(24), r),
		}
	}
	return out, nil
}

// listValues copies row's elements of a list array of a primitive type.
func listValues[T int8 | int32 | float32](a arrow.Array, row int) []T {
	l := a.(*array.List)
	start, end := l.ValueOffsets(row)
	out := make([]T, 0, end-start)
	switch v := l.ListValues().(type) {
	case *array.Int32:
		for i := start; i < end; i++ {
			out = append(out, T(v.Value(int(i))))
		}
	case *array.Int8:
		for i := start; i < end; i++ {
			out = append(out, T(v.Value(int(i))))
		}
	case *array.Float32:
		for i := start; i < end; i++ {
			out = append(out, T(v.Value(int(i))))
		}
	}
	return out
}

package groups_test

import (
	"slices"
	"testing"

	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/stages/groups"
)

// jobs records the jobs an Unserved hands to the run.
type jobs struct{ got []groups.Job }

func (j *jobs) requeue(job groups.Job) { j.got = append(j.got, job) }

// keys is the jobs' tasks and attempts.
func (j *jobs) keys() []pipeline.GroupKey {
	var out []pipeline.GroupKey
	for _, job := range j.got {
		out = append(out, pipeline.GroupKey{TaskIndex: job.Task.Index, Attempt: job.Attempt})
	}
	return out
}

func key(task int64, attempt int) pipeline.GroupKey {
	return pipeline.GroupKey{TaskIndex: task, Attempt: attempt}
}

// A kept group's task is held until its group is handed out (Release) or
// set aside (Requeue): set aside, the task is sampled again once, in the
// next attempt, rendered as it was; handed out, it is held no more.
func TestUnservedHoldRequeueRelease(t *testing.T) {
	u := groups.NewUnserved()
	var j jobs
	u.Bind(j.requeue)
	t0, t1 := &pipeline.Task{Index: 0}, &pipeline.Task{Index: 1}
	u.Hold(t0, 2, false)
	u.Hold(t1, 0, false)
	u.Release(key(1, 0))
	u.Requeue(key(0, 2))
	u.Requeue(key(0, 2)) // a second requeue of the same group: nothing
	if want := []pipeline.GroupKey{key(0, 3)}; !slices.Equal(j.keys(), want) {
		t.Fatalf("requeued %v, want %v", j.keys(), want)
	}
	if j.got[0].Task != t0 || j.got[0].Fresh {
		t.Fatalf("job %+v: want task 0's, rendered already (not fresh)", j.got[0])
	}
	if u.Requeued() != 1 || u.Holding() != 0 {
		t.Fatalf("requeued %d, holding %d; want 1 and 0", u.Requeued(), u.Holding())
	}
}

// A group set aside before its task is held is requeued when it is: at
// Hold (the run keeps it after), or as a resumed run reads the task
// (Resumed: the run samples it itself, once); a group expected is held
// unrendered as a resumed run reads it, and requeued fresh.
func TestUnservedSetAsideBeforeHeld(t *testing.T) {
	u := groups.NewUnserved()
	var j jobs
	u.Requeue(key(5, 0), key(6, 1))
	u.Expect(key(7, 0))
	u.Bind(j.requeue)
	if u.Resumed(&pipeline.Task{Index: 5}, 0) != true {
		t.Fatal("task 5, set aside, not sampled again as it is read")
	}
	if u.Resumed(&pipeline.Task{Index: 5}, 0) {
		t.Fatal("task 5 sampled again twice")
	}
	u.Hold(&pipeline.Task{Index: 6}, 1, false)
	t7 := &pipeline.Task{Index: 7}
	if u.Resumed(t7, 0) {
		t.Fatal("task 7, expected, sampled again before it was set aside")
	}
	u.Requeue(key(7, 0))
	if want := []pipeline.GroupKey{key(6, 2), key(7, 1)}; !slices.Equal(j.keys(), want) {
		t.Fatalf("requeued %v, want %v", j.keys(), want)
	}
	if !j.got[1].Fresh || j.got[1].Task != t7 {
		t.Fatalf("task 7's job %+v: want it fresh (read, never rendered)", j.got[1])
	}
	if u.Requeued() != 3 {
		t.Fatalf("requeued %d, want 3", u.Requeued())
	}
	// Settle: a group set aside whose new attempt a resumed run found
	// committed is requeued no more.
	u.Requeue(key(8, 0))
	if !u.Settle(key(8, 0)) || u.Settle(key(8, 0)) || u.Resumed(&pipeline.Task{Index: 8}, 0) {
		t.Fatal("task 8 settled, then sampled again")
	}
}

// A job due before the run binds its controller is handed out at Bind.
func TestUnservedBindLate(t *testing.T) {
	u := groups.NewUnserved()
	u.Requeue(key(3, 0))
	u.Hold(&pipeline.Task{Index: 3}, 0, false)
	var j jobs
	u.Bind(j.requeue)
	if want := []pipeline.GroupKey{key(3, 1)}; !slices.Equal(j.keys(), want) {
		t.Fatalf("requeued %v at Bind, want %v", j.keys(), want)
	}
}

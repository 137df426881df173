package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// ErrLocked is returned when another run holds a prefix's lock.
var ErrLocked = errors.New("in use by another trajflow run")

// Lease is how long a lock stays valid without renewal; the holder renews
// it every Lease/3. A lock whose lease ran out (its holder died on another
// machine) is taken over; one of a dead process on this machine at once.
const Lease = 60 * time.Second

// lockInfo is the lock object's content.
type lockInfo struct {
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Expires time.Time `json:"expires"`
}

// Lock is a held lock object.
type Lock struct {
	s           *Store
	bucket, key string
	mu          sync.Mutex
	etag        string
	lost        error
	stop        chan struct{}
	done        chan struct{}
}

// TakeLock creates the lock object bucket/key with a conditional PUT
// (If-None-Match: *), so that of two runs racing for it one wins. A lock
// left by a process that is gone (same host, no such pid) or whose lease
// ran out is replaced with a PUT conditional on its ETag (If-Match). The
// lock renews its lease until Release; onLost is called if a renewal
// finds the lock taken or cannot reach the store before the lease ends.
func (s *Store) TakeLock(ctx context.Context, bucket, key string, onLost func(error)) (*Lock, error) {
	l := &Lock{s: s, bucket: bucket, key: key, stop: make(chan struct{}), done: make(chan struct{})}
	for attempt := 0; ; attempt++ {
		etag, err := l.put(ctx, "", true)
		if err == nil {
			l.etag = etag
			break
		}
		if minio.ToErrorResponse(err).Code != "PreconditionFailed" || attempt > 2 {
			return nil, classify(err)
		}
		info, oldTag, rerr := l.read(ctx)
		if IsNotFound(rerr) {
			continue // released meanwhile
		}
		if rerr != nil {
			return nil, classify(rerr)
		}
		if !info.stale() {
			return nil, fmt.Errorf("%w (host %s, pid %d, lease until %s)", ErrLocked, info.Host, info.PID, info.Expires.UTC().Format(time.RFC3339))
		}
		etag, err = l.put(ctx, oldTag, false)
		if err != nil {
			if minio.ToErrorResponse(err).Code == "PreconditionFailed" {
				continue // someone else took it over first
			}
			return nil, classify(err)
		}
		l.etag = etag
		break
	}
	go l.renew(onLost)
	return l, nil
}

// stale reports whether the lock's holder is gone.
func (i lockInfo) stale() bool {
	if time.Now().After(i.Expires) {
		return true
	}
	host, _ := os.Hostname()
	if i.Host == host && i.PID > 0 {
		return syscall.Kill(i.PID, 0) == syscall.ESRCH
	}
	return false
}

// put writes the lock's content: create only (If-None-Match: *) or
// replace the version ifMatch names.
func (l *Lock) put(ctx context.Context, ifMatch string, create bool) (string, error) {
	host, _ := os.Hostname()
	b, _ := json.Marshal(lockInfo{Host: host, PID: os.Getpid(), Expires: time.Now().Add(Lease)})
	opts := minio.PutObjectOptions{ContentType: "application/json"}
	if create {
		opts.SetMatchETagExcept("*")
	} else {
		opts.SetMatchETag(ifMatch)
	}
	info, err := l.s.c.PutObject(ctx, l.bucket, l.key, bytes.NewReader(b), int64(len(b)), opts)
	return info.ETag, err
}

func (l *Lock) read(ctx context.Context) (lockInfo, string, error) {
	var info lockInfo
	o, err := l.s.c.GetObject(ctx, l.bucket, l.key, minio.GetObjectOptions{})
	if err != nil {
		return info, "", err
	}
	defer func() { _ = o.Close() }() // best effort: read only
	st, err := o.Stat()
	if err != nil {
		return info, "", err
	}
	b, err := io.ReadAll(io.LimitReader(o, 1<<16))
	if err != nil {
		return info, "", err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		// Unreadable: treat as expired so that it can be replaced.
		info = lockInfo{}
	}
	return info, st.ETag, nil
}

func (l *Lock) renew(onLost func(error)) {
	defer close(l.done)
	t := time.NewTicker(Lease / 3)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), Lease/3)
		l.mu.Lock()
		etag, err := l.put(ctx, l.etag, false)
		if err == nil {
			l.etag, last = etag, time.Now()
		}
		l.mu.Unlock()
		cancel()
		switch {
		case err == nil:
		case minio.ToErrorResponse(err).Code == "PreconditionFailed":
			l.lose(fmt.Errorf("lock %s/%s was taken by another run", l.bucket, l.key), onLost)
			return
		case time.Since(last) > Lease*2/3:
			l.lose(fmt.Errorf("lock %s/%s: cannot renew its lease: %w", l.bucket, l.key, err), onLost)
			return
		}
	}
}

func (l *Lock) lose(err error, onLost func(error)) {
	l.mu.Lock()
	l.lost = err
	l.mu.Unlock()
	if onLost != nil {
		onLost(err)
	}
}

// Release stops the renewal and deletes the lock object, unless it was
// lost to another run.
func (l *Lock) Release(ctx context.Context) error {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil {
		return nil
	}
	return l.s.Delete(ctx, l.bucket, l.key)
}

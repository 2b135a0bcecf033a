/* pipeline/queue.h - a bounded blocking queue of batches between two pipeline stages.
 *
 * push blocks while the queue is full (that is the backpressure: extraction slows to what
 * the writer sustains); pop blocks while it is empty. close() wakes every waiter: later
 * pushes fail with the close code and drop nothing silently (the caller keeps ownership
 * of a batch it could not push); pops drain what is left, then return NULL.
 * Ownership: push takes the batch; pop hands it over. Thread-safe. */
#ifndef FERRY_PIPELINE_QUEUE_H
#define FERRY_PIPELINE_QUEUE_H

#include "ferry/batch.h"

struct ferry_queue;

struct ferry_queue *ferry_queue_new(int capacity);
void ferry_queue_free(struct ferry_queue *q); /* unrefs batches still queued */
/* FERRY_OK, or the close code (the batch was NOT taken). */
int ferry_queue_push(struct ferry_queue *q, struct ferry_batch *b);
/* The next batch, or NULL once closed and drained. */
struct ferry_batch *ferry_queue_pop(struct ferry_queue *q);
/* Closes with a code: FERRY_OK for a normal end of input (pops drain), anything else for an
 * abort (pops still drain; pushes fail with it). */
void ferry_queue_close(struct ferry_queue *q, int code);
/* Drops every queued batch (abort). */
void ferry_queue_discard(struct ferry_queue *q);
int ferry_queue_length(struct ferry_queue *q);
int ferry_queue_high_water(struct ferry_queue *q);
/* Time spent blocked so far: pushes waiting on a full queue (summed over the pushing
 * threads), pops waiting on an empty one. */
void ferry_queue_waits(struct ferry_queue *q, int64_t *push_wait_us, int64_t *pop_wait_us);

#endif

/*
 * The round trip of one cache line between two CPUs, in nanoseconds.
 *
 *   coreping CPU_A CPU_B [ROUNDS]
 *
 * One thread on each CPU hands a flag back and forth; the printed figure is
 * the median over 9 batches of ROUNDS/9 round trips each (ROUNDS at least 9,
 * 45000 by default; the two CPUs must differ). compare.py runs it
 * before and after every measured run: on a VM the hypervisor moves the
 * virtual CPUs between host cores that share a cache (a round trip of about
 * 100 ns on the development machine) and cores that do not (about 400 ns),
 * and the kernel's network path, which moves every socket's cache lines
 * between the proxy's CPU and the load's, costs about a quarter more in the
 * second placement, for every process alike. Written in C because no tool
 * on the machine measures this and the timing needs native code.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCHES 9

static _Alignas(64) atomic_int flag;
static long per_batch;
static int cpu_b;

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *answer(void *unused)
{
    (void)unused;
    if (pin(cpu_b) != 0) {
        fprintf(stderr, "coreping: cannot run on CPU %d\n", cpu_b);
        exit(1);
    }
    for (long i = 0; i < BATCHES * per_batch; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 1)
            ;
        atomic_store_explicit(&flag, 0, memory_order_release);
    }
    return NULL;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* A whole decimal number in [min, max], or -1. */
static long number(const char *text, long min, long max)
{
    char *end;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || n < min || n > max)
        return -1;
    return n;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: coreping CPU_A CPU_B [ROUNDS]\n");
        return 2;
    }
    long a = number(argv[1], 0, CPU_SETSIZE - 1), b = number(argv[2], 0, CPU_SETSIZE - 1);
    long rounds = argc > 3 ? number(argv[3], BATCHES, 1000000000L) : 45000;
    if (a < 0 || b < 0 || a == b || rounds < 0) {
        /* On one CPU the two threads would hand the flag over only when the
         * scheduler switches between them: no measure, and no end. */
        fprintf(stderr, "coreping: want two different CPU numbers and at least %d rounds, got \"%s\" \"%s\"%s%s%s\n",
                BATCHES, argv[1], argv[2], argc > 3 ? " \"" : "", argc > 3 ? argv[3] : "", argc > 3 ? "\"" : "");
        return 2;
    }
    int cpu_a = (int)a;
    cpu_b = (int)b;
    per_batch = rounds / BATCHES;
    if (pin(cpu_a) != 0) {
        fprintf(stderr, "coreping: cannot run on CPU %d\n", cpu_a);
        return 1;
    }
    pthread_t other;
    if (pthread_create(&other, NULL, answer, NULL) != 0) {
        fprintf(stderr, "coreping: cannot start a thread\n");
        return 1;
    }
    double batch_ns[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double start = now_ns();
        for (long i = 0; i < per_batch; i++) {
            atomic_store_explicit(&flag, 1, memory_order_release);
            while (atomic_load_explicit(&flag, memory_order_acquire) != 0)
                ;
        }
        batch_ns[b] = (now_ns() - start) / per_batch;
    }
    pthread_join(other, NULL);
    qsort(batch_ns, BATCHES, sizeof batch_ns[0], by_value);
    printf("%.0f\n", batch_ns[BATCHES / 2]);
    return 0;
}

package io.laneway.lane;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LaneTest {
    @TempDir
    Path dir;

    @AfterEach
    void clean() {
        Lane.set(null);
        OwnLane.configure(null, null);
    }

    @Test
    void setReturnsThePreviousLaneAndRestorePutsItBack() {
        assertNull(Lane.current());
        assertNull(Lane.set("dev-alice"));
        assertEquals("dev-alice", Lane.current());
        String previous = Lane.set("gray");
        assertEquals("dev-alice", previous);
        assertEquals("gray", Lane.current());
        Lane.restore(previous);
        assertEquals("dev-alice", Lane.current());
        Lane.restore(null);
        assertNull(Lane.current());
    }

    @Test
    void aLaneIsPerThread() throws Exception {
        Lane.set("dev-alice");
        AtomicReference<String> seen = new AtomicReference<>("unset");
        Thread other = new Thread(() -> seen.set(Lane.current()));
        other.start();
        other.join();
        assertNull(seen.get());
    }

    @Test
    void effectiveIsTheRequestLaneElseTheOwnLaneElseNull() throws Exception {
        assertNull(Lane.effective());
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "app=\"shop\"\nlaneway.io/lane=\"gray\"\n");
        OwnLane.configure(labels, null);
        assertEquals("gray", Lane.effective());
        Lane.set("dev-alice");
        assertEquals("dev-alice", Lane.effective());
        Lane.set(null);
        assertEquals("gray", Lane.effective());
    }

    @Test
    void validLanesAreKubernetesLabelValues() {
        for (String ok : List.of("a", "dev-alice", "gray", "v1.2_x", "A9", "x".repeat(63))) {
            assertTrue(Lane.isValid(ok), ok);
        }
        for (String bad : new String[] {null, "", "-dev", "dev-", ".x", "x_", "dev alice", "dev/alice",
                "dev,x", "x".repeat(64), "caf\u00e9", "a\nb", "<script>"}) {
            assertFalse(Lane.isValid(bad), String.valueOf(bad));
        }
        assertNull(Lane.validOrNull("bad lane"));
        assertEquals("ok", Lane.validOrNull("ok"));
    }

    @Test
    void wrappedRunnableRunsWithTheLaneCapturedWhenWrappedAndRestoresTheWorker() throws Exception {
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            Lane.set("dev-alice");
            AtomicReference<String> inTask = new AtomicReference<>();
            Runnable task = Lane.wrap(() -> inTask.set(Lane.current()));
            Lane.set("gray");
            pool.submit(task).get(5, TimeUnit.SECONDS);
            assertEquals("dev-alice", inTask.get());
            assertNull(pool.submit(Lane::current).get(5, TimeUnit.SECONDS), "the worker keeps no lane");
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void wrappedTasksRestoreTheWorkerEvenWhenTheyThrow() throws Exception {
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            Lane.set("dev-alice");
            Callable<String> failing = Lane.wrap((Callable<String>) () -> {
                throw new IllegalStateException("boom");
            });
            Future<String> failed = pool.submit(failing);
            assertThrows(Exception.class, () -> failed.get(5, TimeUnit.SECONDS));
            assertNull(pool.submit(Lane::current).get(5, TimeUnit.SECONDS));
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void wrappedCallableReturnsItsValueWithTheLane() throws Exception {
        Lane.set("gray");
        Callable<String> task = Lane.wrap(() -> "lane=" + Lane.current());
        Lane.set(null);
        assertEquals("lane=gray", task.call());
        assertNull(Lane.current());
    }

    @Test
    void wrappedExecutorServiceCarriesTheSubmittersLane() throws Exception {
        ExecutorService pool = Lane.wrap(Executors.newFixedThreadPool(2));
        try {
            Lane.set("dev-alice");
            assertEquals("dev-alice", pool.submit(Lane::current).get(5, TimeUnit.SECONDS));
            AtomicReference<String> seen = new AtomicReference<>();
            CountDownLatch done = new CountDownLatch(1);
            pool.execute(() -> {
                seen.set(Lane.current());
                done.countDown();
            });
            assertTrue(done.await(5, TimeUnit.SECONDS));
            assertEquals("dev-alice", seen.get());
            List<Future<String>> all = pool.invokeAll(List.of(Lane::current, Lane::current));
            for (Future<String> f : all) {
                assertEquals("dev-alice", f.get());
            }
            assertEquals("dev-alice", pool.invokeAny(List.of(Lane::current)));
            Lane.set("gray");
            assertEquals("gray", pool.submit(Lane::current).get(5, TimeUnit.SECONDS));
            Lane.set(null);
            assertNull(pool.submit(Lane::current).get(5, TimeUnit.SECONDS));
            assertSame(pool, Lane.wrap(pool), "wrapping twice adds nothing");
        } finally {
            pool.shutdownNow();
        }
        assertTrue(pool.awaitTermination(5, TimeUnit.SECONDS));
        assertTrue(pool.isShutdown());
    }

    @Test
    void wrappedExecutorCarriesTheLaneIntoCompletableFutures() throws Exception {
        ExecutorService raw = Executors.newSingleThreadExecutor();
        try {
            Executor executor = Lane.wrap((Executor) raw::execute);
            Lane.set("dev-alice");
            String seen = CompletableFuture.supplyAsync(Lane::current, executor).get(5, TimeUnit.SECONDS);
            assertEquals("dev-alice", seen);
            assertNull(raw.submit(Lane::current).get(5, TimeUnit.SECONDS));
        } finally {
            raw.shutdownNow();
        }
    }
}

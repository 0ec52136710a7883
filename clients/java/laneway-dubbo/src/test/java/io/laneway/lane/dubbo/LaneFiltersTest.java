package io.laneway.lane.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import io.laneway.lane.Lane;
import io.laneway.lane.LaneMetrics;
import io.laneway.lane.OwnLane;
import io.laneway.lane.Probe;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AsyncContext;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcInvocation;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LaneFiltersTest {
    private static final String TAG = DubboLane.TAG_KEY;

    @TempDir
    Path dir;

    @AfterEach
    void clean() {
        OwnLane.configure(null, null);
        Lane.set(null);
        RpcContext.removeContext();
    }

    /** What the next hop receives when the service being served makes one call. */
    private static Map<String, Object> hop(String... incoming) {
        AtomicReference<Map<String, Object>> sent = new AtomicReference<>();
        Fixtures.serve(Fixtures.incoming(incoming), in -> Fixtures.call(Fixtures.outgoing(), out -> {
            sent.set(Map.copyOf(out.getObjectAttachments()));
            return "ok";
        }));
        return sent.get();
    }

    @Test
    void dubboDropsTheTagAfterOneHopWithoutLaneway() {
        AtomicReference<Map<String, Object>> server = new AtomicReference<>();
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice", "trace", "t1"), in -> {
            server.set(Map.copyOf(RpcContext.getServerAttachment().getObjectAttachments()));
            return "ok";
        });
        assertEquals("t1", server.get().get("trace"), "other attachments pass through");
        assertNull(server.get().get(TAG), "ContextFilter strips dubbo.tag from what goes on");
    }

    @Test
    void theProviderSetsTheLaneWhileServing() {
        AtomicReference<String> seen = new AtomicReference<>();
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> {
            seen.set(Lane.current());
            return "ok";
        });
        assertEquals("dev-alice", seen.get());
    }

    @Test
    void theLaneIsKeptAcrossTheProviderToConsumerHop() {
        Map<String, Object> sent = hop(TAG, "dev-alice", "trace", "t1");
        assertEquals("dev-alice", sent.get(TAG));
        assertEquals("t1", sent.get("trace"));
        assertFalse(sent.containsKey(DubboLane.SERVER_LANE_KEY), "laneway's own key stays off the wire");
    }

    @Test
    void aTagTheApplicationSetsWins() {
        AtomicReference<Object> sent = new AtomicReference<>();
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> {
            RpcContext.getClientAttachment().setAttachment(TAG, "gray");
            return Fixtures.call(Fixtures.outgoing(), out -> {
                sent.set(out.getAttachment(TAG));
                return "ok";
            });
        });
        assertEquals("gray", sent.get());
    }

    @Test
    void noLaneAndNoOwnLaneMeansNoTag() {
        Map<String, Object> sent = hop("trace", "t1");
        assertFalse(sent.containsKey(TAG), sent.toString());
    }

    @Test
    void theOwnLaneIsUsedWhenTheRequestHasNone() throws Exception {
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        OwnLane.configure(labels, null);
        assertEquals("gray", hop().get(TAG), "served request without a lane");
        assertEquals("dev-alice", hop(TAG, "dev-alice").get(TAG), "the request's lane beats the own lane");

        AtomicReference<Object> sent = new AtomicReference<>();
        Fixtures.call(Fixtures.outgoing(), out -> {
            sent.set(out.getAttachment(TAG));
            return "ok";
        });
        assertEquals("gray", sent.get(), "a call made outside any request");
    }

    @Test
    void aTagConfiguredOnTheReferenceBeatsTheOwnLaneButNotTheRequestsLane() throws Exception {
        Path labels = dir.resolve("labels");
        Files.writeString(labels, "laneway.io/lane=\"gray\"\n");
        OwnLane.configure(labels, null);
        URL tagged = Fixtures.CONSUMER_URL.addParameter(TAG, "blue");
        AtomicReference<Object> sent = new AtomicReference<>("unset");
        Fixtures.call(tagged, Fixtures.outgoing(), out -> {
            sent.set(out.getAttachment(TAG));
            return "ok";
        });
        assertNull(sent.get(), "left to the router, which falls back to the reference's tag");
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> Fixtures.call(tagged, Fixtures.outgoing(), out -> {
            sent.set(out.getAttachment(TAG));
            return "ok";
        }));
        assertEquals("dev-alice", sent.get());
    }

    @Test
    void anInvalidIncomingTagIsNotALane() {
        AtomicReference<String> seen = new AtomicReference<>("unset");
        Map<String, Object> sent = new ConcurrentHashMap<>();
        Fixtures.serve(Fixtures.incoming(TAG, "not a lane"), in -> {
            seen.set(Lane.current());
            return Fixtures.call(Fixtures.outgoing(), out -> {
                sent.putAll(out.getObjectAttachments());
                return "ok";
            });
        });
        assertNull(seen.get());
        assertFalse(sent.containsKey(TAG));
    }

    @Test
    void theLaneIsClearedAfterTheCall() {
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> "ok");
        assertNull(Lane.current(), "the pooled thread keeps no lane");
        AtomicReference<String> next = new AtomicReference<>("unset");
        Fixtures.serve(Fixtures.incoming(), in -> {
            next.set(Lane.current());
            return "ok";
        });
        assertNull(next.get(), "the next call on the same thread sees nothing");
        assertFalse(hop().containsKey(TAG));
    }

    @Test
    void theLaneIsClearedWhenTheServiceThrows() {
        assertThrows(IllegalStateException.class, () -> Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> {
            throw new IllegalStateException("boom");
        }));
        assertNull(Lane.current());
        assertFalse(hop().containsKey(TAG));
    }

    @Test
    void aLaneSetByTheCallerOfTheFilterIsRestored() {
        Lane.set("outer");
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> "ok");
        assertEquals("outer", Lane.current());
    }

    @Test
    void anAsyncServiceKeepsItsLaneOnTheThreadThatTakesOver() throws Exception {
        CompletableFuture<Object> sentFromWorker = new CompletableFuture<>();
        CompletableFuture<String> laneOnWorker = new CompletableFuture<>();
        Result result = Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> {
            AsyncContext async = RpcContext.startAsync();
            Thread worker = new Thread(() -> {
                async.signalContextSwitch();
                try {
                    laneOnWorker.complete(Lane.current());
                    Fixtures.call(Fixtures.outgoing(), out -> {
                        sentFromWorker.complete(out.getAttachment(TAG));
                        return "ok";
                    });
                    async.write("done");
                } catch (Throwable t) {
                    sentFromWorker.completeExceptionally(t);
                    async.write(t);
                } finally {
                    async.resetContext();
                }
            });
            worker.start();
            return null;
        });
        assertNull(Lane.current(), "the Dubbo thread is free of the lane at once");
        assertEquals("dev-alice", laneOnWorker.get(5, TimeUnit.SECONDS));
        assertEquals("dev-alice", sentFromWorker.get(5, TimeUnit.SECONDS));
        assertNull(Lane.current());
        assertNull(result.get(5, TimeUnit.SECONDS).getAttachment(TAG));
    }

    @Test
    void theServerAttachmentIsNotALaneUnlessTheCallWentAsync() {
        RpcContext.getServerAttachment().setAttachment(DubboLane.SERVER_LANE_KEY, "stale");
        assertNull(Lane.current());
        assertNull(DubboLane.asyncServerLane());
    }

    @Test
    void anAsyncConsumerCallCarriesTheTagOnItsInvocation() throws Exception {
        AtomicReference<Object> routedWith = new AtomicReference<>();
        AtomicReference<CompletableFuture<String>> future = new AtomicReference<>();
        Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> {
            RpcInvocation out = Fixtures.outgoing();
            Result r = Fixtures.call(out, wire -> {
                routedWith.set(wire.getAttachment(TAG));
                return "ok";
            });
            // what a CompletableFuture stub hands the application: completes later, elsewhere
            CompletableFuture<String> answer = new CompletableFuture<>();
            r.whenCompleteWithContext((res, t) -> CompletableFuture.runAsync(() -> answer.complete(
                    String.valueOf(res.getValue()) + ":" + out.getObjectAttachment(TAG))));
            future.set(answer);
            return "served";
        });
        assertEquals("dev-alice", routedWith.get());
        assertEquals("ok:dev-alice", future.get().get(5, TimeUnit.SECONDS));
    }

    @Test
    void theConsumerFilterWorksWithoutDubbosContextFilterToo() throws Exception {
        Lane.set("dev-alice");
        RpcInvocation inv = Fixtures.outgoing();
        AtomicReference<Object> sent = new AtomicReference<>();
        new LaneConsumerFilter().invoke(Fixtures.invoker(Fixtures.CONSUMER_URL, out -> {
            sent.set(out.getAttachment(TAG));
            return "ok";
        }), inv);
        assertEquals("dev-alice", sent.get());
    }

    private static final String HOP = "{\"app\":null,\"pod\":\"order-0\",\"lane\":%s,\"learnt\":\"%s\",\"own\":null}";

    @Test
    void aProbedCallIsAnsweredWithItsHopAndTheHopsOfItsOnwardCalls() {
        System.setProperty(Probe.POD_PROPERTY, "order-0");
        try {
            Result result = Fixtures.serve(Fixtures.incoming(TAG, "dev-alice", Probe.MARK, "p-1"),
                    in -> Fixtures.callProvider(Fixtures.outgoing(), out -> "user").getValue());
            assertEquals("[" + String.format(HOP, "\"dev-alice\"", "tag") + "," + String.format(HOP, "\"dev-alice\"", "tag") + "]",
                    result.getObjectAttachment(Probe.HOPS));
            assertNull(Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> "ok").getObjectAttachment(Probe.HOPS));
        } finally {
            System.clearProperty(Probe.POD_PROPERTY);
        }
    }

    @Test
    void aCallFromABareThreadPoolCarriesTheProbeButNotTheLane() throws Exception {
        System.setProperty(Probe.POD_PROPERTY, "order-0");
        ExecutorService bare = Executors.newSingleThreadExecutor();
        try {
            Result result = Fixtures.serve(Fixtures.incoming(TAG, "dev-alice", Probe.MARK, "p-2"),
                    in -> CompletableFuture.supplyAsync(
                            () -> Fixtures.callProvider(Fixtures.outgoing(), out -> "user").getValue(), bare).join());
            assertEquals("[" + String.format(HOP, "\"dev-alice\"", "tag") + "," + String.format(HOP, "null", "none") + "]",
                    result.getObjectAttachment(Probe.HOPS));
        } finally {
            bare.shutdown();
            System.clearProperty(Probe.POD_PROPERTY);
        }
    }

    @Test
    void aCallInNoLaneFromACallerInOneThroughAPlainClientCountsAsLost() {
        List<String> told = new ArrayList<>();
        Runnable unregister = LaneMetrics.register(LaneMetrics.of(
                (lane, learnt) -> told.add("served " + lane + " " + learnt), caller -> told.add("lost " + caller)));
        try {
            Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"),
                    in -> Fixtures.callProviderPlain(Fixtures.outgoing(), out -> "user").getValue());
            assertEquals(List.of("served dev-alice tag", "served null none", "lost dev-alice"), told);
            told.clear();
            Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"),
                    in -> Fixtures.callProvider(Fixtures.outgoing(), out -> "user").getValue());
            assertEquals(List.of("served dev-alice tag", "served dev-alice tag"), told);
        } finally {
            unregister.run();
        }
    }

    @Test
    void aCallAnsweredWithAnExceptionCountsAsFailedInItsLane() {
        List<String> failed = new ArrayList<>();
        Runnable counting = LaneMetrics.register(new LaneMetrics() {
            @Override
            public void served(String lane, String learnt) {}

            @Override
            public void lost(String callerLane) {}

            @Override
            public void failed(String lane) {
                failed.add(lane);
            }
        });
        try {
            Fixtures.serveResult(Fixtures.incoming(TAG, "gray"),
                    in -> AsyncRpcResult.newDefaultAsyncResult(new IllegalStateException("down"), in));
            Fixtures.serve(Fixtures.incoming(TAG, "gray"), in -> "fine");
            assertThrows(IllegalStateException.class, () -> Fixtures.serve(Fixtures.incoming(TAG, "dev-alice"), in -> {
                throw new IllegalStateException("down");
            }));
        } finally {
            counting.run();
        }
        assertEquals(List.of("gray", "dev-alice"), failed);
    }
}

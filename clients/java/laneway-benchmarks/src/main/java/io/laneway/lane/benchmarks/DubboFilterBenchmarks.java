package io.laneway.lane.benchmarks;

import io.laneway.lane.Lane;
import io.laneway.lane.dubbo.DubboLane;
import io.laneway.lane.dubbo.LaneConsumerFilter;
import io.laneway.lane.dubbo.LaneProviderFilter;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcInvocation;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.TearDown;

/**
 * The Dubbo filters on pre-built invocations with trivial invokers: what laneway adds to a call,
 * without Dubbo's own per-call cost (a new invocation, its attachment map, the codec).
 */
public class DubboFilterBenchmarks extends Measured {
    private static final String SERVICE = "io.laneway.bench.Back";
    private static final URL URL_ = URL.valueOf("dubbo://127.0.0.1:20880/" + SERVICE);

    private final LaneProviderFilter provider = new LaneProviderFilter();
    private final LaneConsumerFilter consumer = new LaneConsumerFilter();

    private RpcInvocation incoming;
    private RpcInvocation outgoing;
    private RpcInvocation tagged;
    private Result result;

    private Invoker<Object> trivial;
    // the wire: hands the outgoing invocation back as it was, as the next call's new one would be
    private Invoker<Object> untagWire;
    private Invoker<Object> hopService;
    private Invoker<Object> hopServiceTagged;

    @Setup
    public void setUp() {
        incoming = invocation();
        incoming.setAttachment(DubboLane.TAG_KEY, "dev-alice");
        outgoing = invocation();
        tagged = invocation();
        tagged.setAttachment(DubboLane.TAG_KEY, "gray");
        result = AsyncRpcResult.newDefaultAsyncResult("ok", incoming);
        trivial = invoker(inv -> result);
        untagWire = invoker(inv -> {
            inv.getObjectAttachments().remove(DubboLane.TAG_KEY);
            return result;
        });
        hopService = invoker(inv -> consumer.invoke(untagWire, outgoing));
        hopServiceTagged = invoker(inv -> consumer.invoke(trivial, tagged));
    }

    @TearDown
    public void tearDown() {
        Lane.set(null);
        RpcContext.removeContext();
    }

    /** The provider filter serving a call of the lane the thread served last (steady state). */
    @Benchmark
    public Result providerFilter() {
        return provider.invoke(trivial, incoming);
    }

    /** The consumer filter on a call that already carries a tag (set by the application). */
    @Benchmark
    public Result consumerFilterApplicationTag() {
        return consumer.invoke(trivial, tagged);
    }

    /**
     * The consumer filter setting {@code dubbo.tag} on an untagged call; the one allocation is the
     * attachment map's entry, which {@link #attachmentEntryBaseline} shows is Dubbo's own.
     */
    @Benchmark
    public Result consumerFilterSetsTag() {
        String previous = Lane.set("dev-alice");
        try {
            return consumer.invoke(untagWire, outgoing);
        } finally {
            Lane.restore(previous);
        }
    }

    /** A whole hop: served call of lane dev-alice, one outgoing call tagged by laneway. */
    @Benchmark
    public Result providerToConsumerHop() {
        return provider.invoke(hopService, incoming);
    }

    /** The same hop with the tag already on the outgoing call (the application's, or a retry's). */
    @Benchmark
    public Result providerToConsumerHopApplicationTag() {
        return provider.invoke(hopServiceTagged, incoming);
    }

    /** No laneway at all: setting and clearing one attachment, the cost every tag has in Dubbo. */
    @Benchmark
    public Result attachmentEntryBaseline() {
        outgoing.setAttachment(DubboLane.TAG_KEY, "dev-alice");
        return untagWire.invoke(outgoing);
    }

    private static RpcInvocation invocation() {
        return new RpcInvocation(null, "who", SERVICE, SERVICE, new Class<?>[0], new Object[0]);
    }

    private static Invoker<Object> invoker(java.util.function.Function<Invocation, Result> body) {
        return new Invoker<>() {
            @Override
            public Class<Object> getInterface() {
                return Object.class;
            }

            @Override
            public Result invoke(Invocation invocation) {
                return body.apply(invocation);
            }

            @Override
            public URL getUrl() {
                return URL_;
            }

            @Override
            public boolean isAvailable() {
                return true;
            }

            @Override
            public void destroy() {}
        };
    }
}

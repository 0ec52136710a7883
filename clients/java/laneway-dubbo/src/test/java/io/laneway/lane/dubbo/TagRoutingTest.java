package io.laneway.lane.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

import io.laneway.lane.Lane;
import org.apache.dubbo.common.URL;
import org.apache.dubbo.common.constants.CommonConstants;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.Cluster;
import org.apache.dubbo.rpc.cluster.directory.StaticDirectory;
import org.apache.dubbo.rpc.model.ApplicationModel;
import org.apache.dubbo.rpc.model.ModuleModel;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Dubbo's real cluster invoker, cluster filter chain (activated from the SPI files) and tag
 * router over three instances of one service: baseline, dev-alice and gray (static tags).
 */
class TagRoutingTest {
    private static final ModuleModel MODULE = ApplicationModel.defaultModel().getDefaultModule();

    @AfterEach
    void clean() {
        Lane.set(null);
        RpcContext.removeContext();
    }

    private static Invoker<Back> instance(String name, int port, String tag) {
        URL url = URL.valueOf("dubbo://127.0.0.1:" + port + "/" + Back.class.getName()
                + "?interface=" + Back.class.getName() + (tag == null ? "" : "&dubbo.tag=" + tag))
                .setScopeModel(MODULE);
        return Fixtures.invoker(Back.class, url,
                invocation -> AsyncRpcResult.newDefaultAsyncResult(name, invocation));
    }

    /** A reference to the three instances, as a registry directory builds it. */
    private static Invoker<Back> reference(String extraParameters) {
        URL consumer = URL.valueOf("consumer://127.0.0.1/" + Back.class.getName() + "?interface="
                + Back.class.getName() + "&application=front" + extraParameters).setScopeModel(MODULE);
        StaticDirectory<Back> directory = new StaticDirectory<>(consumer, List.of(
                instance("baseline", 20881, null), instance("dev-alice", 20882, "dev-alice"),
                instance("gray", 20883, "gray")));
        directory.buildRouterChain();
        return Cluster.getCluster(MODULE, "failover").join(directory, true);
    }

    private static String call(Invoker<Back> reference) throws Throwable {
        RpcInvocation inv = new RpcInvocation(null, "who", Back.class.getName(), Back.class.getName(), new Class<?>[0],
                new Object[0]);
        return (String) reference.invoke(inv).recreate();
    }

    /** Which instance a call made while serving a request of {@code lane} reaches. */
    private static String whileServing(Invoker<Back> reference, String lane) throws Throwable {
        RpcInvocation incoming = Fixtures.incoming(lane == null ? new String[0] : new String[] {DubboLane.TAG_KEY, lane});
        AtomicReference<Object> reached = new AtomicReference<>();
        Fixtures.serve(incoming, in -> {
            try {
                reached.set(call(reference));
            } catch (Throwable t) {
                reached.set(t);
            }
            return "ok";
        });
        if (reached.get() instanceof Throwable) {
            throw (Throwable) reached.get();
        }
        return (String) reached.get();
    }

    @Test
    void aCallMadeWhileServingALaneReachesThatLanesInstance() throws Throwable {
        Invoker<Back> reference = reference("");
        assertEquals("dev-alice", whileServing(reference, "dev-alice"));
        assertEquals("gray", whileServing(reference, "gray"));
        assertEquals("baseline", whileServing(reference, null));
    }

    @Test
    void aLaneWithNoInstanceOfItsOwnFallsBackToBaseline() throws Throwable {
        assertEquals("baseline", whileServing(reference(""), "dev-bob"));
    }

    @Test
    void theApplicationsOwnTagWins() throws Throwable {
        Invoker<Back> reference = reference("");
        AtomicReference<String> reached = new AtomicReference<>();
        Fixtures.serve(Fixtures.incoming(DubboLane.TAG_KEY, "dev-alice"), in -> {
            RpcContext.getClientAttachment().setAttachment(DubboLane.TAG_KEY, "gray");
            try {
                reached.set(call(reference));
            } catch (Throwable t) {
                throw new IllegalStateException(t);
            }
            return "ok";
        });
        assertEquals("gray", reached.get());
    }

    @Test
    void withoutLanewaysClusterFilterTheLaneIsLostAfterOneHop() throws Throwable {
        Invoker<Back> reference = reference("&" + CommonConstants.REFERENCE_FILTER_KEY + "=-laneway-consumer");
        assertEquals("baseline", whileServing(reference, "dev-alice"));
    }
}

package io.laneway.lane.dubbo;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.Supplier;

import io.laneway.lane.Lane;
import org.apache.dubbo.config.ApplicationConfig;
import org.apache.dubbo.config.ProtocolConfig;
import org.apache.dubbo.config.ReferenceConfig;
import org.apache.dubbo.config.RegistryConfig;
import org.apache.dubbo.config.ServiceConfig;
import org.apache.dubbo.config.bootstrap.DubboBootstrap;
import org.apache.dubbo.rpc.AsyncContext;
import org.apache.dubbo.rpc.RpcContext;
import org.apache.dubbo.rpc.model.FrameworkModel;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Three Dubbo applications in one JVM, each in its own framework model, talking Dubbo's protocol
 * over 127.0.0.1: a client calls front, front calls back. The laneway filters are on the class
 * path only (SPI), as in an application.
 */
class DubboEndToEndTest {
    private static final List<DubboBootstrap> APPS = new ArrayList<>();
    private static final ExecutorService PLAIN_POOL = Executors.newSingleThreadExecutor();
    private static final ExecutorService WRAPPED_POOL = Lane.wrap(Executors.newSingleThreadExecutor());
    private static Front front;

    /** Answers with what a provider sees: the tag it was called with and the lane it serves. */
    static final class BackImpl implements Back {
        // the service context's invocation is the one way a service can read its own dubbo.tag
        @Override
        @SuppressWarnings("deprecation")
        public String who() {
            return "tag=" + RpcContext.getServiceContext().getInvocation().getAttachment(DubboLane.TAG_KEY)
                    + " lane=" + Lane.current();
        }

        @Override
        public CompletableFuture<String> whoAsync() {
            return CompletableFuture.completedFuture(who());
        }
    }

    static final class FrontImpl implements Front {
        private final Supplier<Back> back;

        FrontImpl(Supplier<Back> back) {
            this.back = back;
        }

        @Override
        public String call() {
            return back.get().who();
        }

        @Override
        public String callFromAsyncContext() {
            AsyncContext async = RpcContext.startAsync();
            // a plain pool, so the lane can only come from Dubbo's restored context
            PLAIN_POOL.execute(() -> {
                async.signalContextSwitch();
                try {
                    async.write(back.get().who() + " worker-lane=" + Lane.current());
                } catch (Throwable t) {
                    async.write(t);
                } finally {
                    async.resetContext();
                }
            });
            return null;
        }

        @Override
        public String callThroughFuture() {
            try {
                return back.get().whoAsync().get();
            } catch (InterruptedException | ExecutionException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public String callTagged(String tag) {
            RpcContext.getClientAttachment().setAttachment(DubboLane.TAG_KEY, tag);
            return back.get().who();
        }

        @Override
        public String callFromWrappedPool() {
            try {
                return WRAPPED_POOL.submit(() -> back.get().who()).get();
            } catch (InterruptedException | ExecutionException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    private static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    private static DubboBootstrap app(String name) {
        ApplicationConfig application = new ApplicationConfig(name);
        application.setQosEnable(false);
        DubboBootstrap app = DubboBootstrap.newInstance(new FrameworkModel())
                .application(application)
                .registry(new RegistryConfig(RegistryConfig.NO_AVAILABLE));
        APPS.add(app);
        return app;
    }

    private static ProtocolConfig protocol(int port) {
        ProtocolConfig protocol = new ProtocolConfig("dubbo", port);
        protocol.setHost("127.0.0.1");
        // one server thread, so that consecutive calls share it
        protocol.setThreads(1);
        return protocol;
    }

    private static <T> ReferenceConfig<T> reference(Class<T> type, int port) {
        ReferenceConfig<T> reference = new ReferenceConfig<>();
        reference.setInterface(type);
        reference.setUrl("dubbo://127.0.0.1:" + port + "/" + type.getName());
        reference.setTimeout(10_000);
        return reference;
    }

    @BeforeAll
    static void start() throws IOException {
        int backPort = freePort();
        ServiceConfig<Back> back = new ServiceConfig<>();
        back.setInterface(Back.class);
        back.setRef(new BackImpl());
        app("back").protocol(protocol(backPort)).service(back).start();

        int frontPort = freePort();
        ReferenceConfig<Back> toBack = reference(Back.class, backPort);
        ServiceConfig<Front> frontService = new ServiceConfig<>();
        frontService.setInterface(Front.class);
        frontService.setRef(new FrontImpl(toBack::get));
        frontService.setAsync(false);
        app("front").protocol(protocol(frontPort)).service(frontService).reference(toBack).start();

        ReferenceConfig<Front> toFront = reference(Front.class, frontPort);
        app("client").reference(toFront).start();
        front = toFront.get();
    }

    @AfterAll
    static void stop() {
        for (DubboBootstrap app : APPS) {
            app.stop();
        }
        PLAIN_POOL.shutdownNow();
        WRAPPED_POOL.shutdownNow();
    }

    @AfterEach
    void clean() {
        RpcContext.removeContext();
    }

    /** Calls front with {@code dubbo.tag} set, as a gateway or an upstream Dubbo service does. */
    private static <T> T inLane(String lane, Supplier<T> call) {
        RpcContext.getClientAttachment().setAttachment(DubboLane.TAG_KEY, lane);
        return call.get();
    }

    @Test
    void theLaneReachesTheSecondHop() {
        assertEquals("tag=dev-alice lane=dev-alice", inLane("dev-alice", front::call));
    }

    @Test
    void aCallWithoutALaneStaysWithoutOneOnTheSameServerThread() {
        assertEquals("tag=dev-alice lane=dev-alice", inLane("dev-alice", front::call));
        assertEquals("tag=null lane=null", front.call());
        assertEquals("tag=gray lane=gray", inLane("gray", front::call));
    }

    @Test
    void anAsyncServiceCallsOnInTheLaneFromTheThreadThatTookOver() {
        assertEquals("tag=dev-alice lane=dev-alice worker-lane=dev-alice",
                inLane("dev-alice", front::callFromAsyncContext));
        assertEquals("tag=null lane=null worker-lane=null", front.callFromAsyncContext());
    }

    @Test
    void aCompletableFutureCallCarriesTheLane() {
        assertEquals("tag=dev-alice lane=dev-alice", inLane("dev-alice", front::callThroughFuture));
    }

    @Test
    void aTagTheServiceSetsItselfWins() {
        assertEquals("tag=blue lane=blue", inLane("dev-alice", () -> front.callTagged("blue")));
    }

    @Test
    void workHandedToAWrappedPoolKeepsTheLane() {
        assertEquals("tag=dev-alice lane=dev-alice", inLane("dev-alice", front::callFromWrappedPool));
        assertEquals("tag=null lane=null", front.callFromWrappedPool());
    }
}

package io.laneway.lane.servlet;

import java.io.IOException;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.net.Authenticator;
import java.net.CookieHandler;
import java.net.ProxySelector;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.WebSocket;
import java.time.Duration;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.function.BiPredicate;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;

import io.laneway.lane.Lane;
import io.laneway.lane.Probe;

/**
 * A {@link HttpClient} that forwards the lane: every request sent without the lane header gets it,
 * set to {@link Lane#effective()} (the served request's lane, else this instance's own lane;
 * nothing when both are {@code null}). A call made for a probed request ({@link Probe}) carries
 * its mark and adds the hop records it is answered with to the probe. Everything else goes to the
 * wrapped client.
 *
 * <pre>{@code HttpClient http = LaneHttpClient.wrap(HttpClient.newHttpClient());}</pre>
 */
public final class LaneHttpClient extends HttpClient {
    private static final BiPredicate<String, String> ALL_HEADERS = (name, value) -> true;

    // HttpClient gained shutdown/close in Java 21; looked up so that the wrapper closes its
    // delegate there and still runs on 17
    private static final MethodHandle SHUTDOWN = lifecycle("shutdown", MethodType.methodType(void.class));
    private static final MethodHandle SHUTDOWN_NOW = lifecycle("shutdownNow", MethodType.methodType(void.class));
    private static final MethodHandle CLOSE = lifecycle("close", MethodType.methodType(void.class));
    private static final MethodHandle IS_TERMINATED = lifecycle("isTerminated", MethodType.methodType(boolean.class));
    private static final MethodHandle AWAIT_TERMINATION =
            lifecycle("awaitTermination", MethodType.methodType(boolean.class, Duration.class));

    private final HttpClient delegate;
    private final String header;

    private LaneHttpClient(HttpClient delegate, String header) {
        this.delegate = Objects.requireNonNull(delegate, "client");
        this.header = Objects.requireNonNull(header, "header");
        if (header.isEmpty()) {
            throw new IllegalArgumentException("empty header name");
        }
    }

    /** {@code client}, forwarding the lane in header {@code x-lane}. */
    public static HttpClient wrap(HttpClient client) {
        return wrap(client, LaneFilter.DEFAULT_HEADER);
    }

    /** {@code client}, forwarding the lane in {@code header}. */
    public static HttpClient wrap(HttpClient client, String header) {
        if (client instanceof LaneHttpClient && ((LaneHttpClient) client).header.equalsIgnoreCase(header)) {
            return client;
        }
        return new LaneHttpClient(client, header);
    }

    /** {@code request} with the lane header, unless it has one already or there is no lane. */
    public HttpRequest withLane(HttpRequest request) {
        return withLane(request, Probe.forCall());
    }

    // a call made for a probe ({@link Probe#forCall}) carries its mark, but only the lane it has
    private HttpRequest withLane(HttpRequest request, Probe probe) {
        HttpHeaders headers = request.headers();
        String lane = headers.firstValue(header).isPresent() ? null : Lane.effective();
        boolean mark = probe != null && headers.firstValue(Probe.MARK).isEmpty();
        if (lane == null && !mark) {
            return request;
        }
        HttpRequest.Builder b = HttpRequest.newBuilder(request, ALL_HEADERS);
        if (lane != null) {
            b.header(header, lane);
        }
        if (mark) {
            b.header(Probe.MARK, probe.mark());
        }
        return b.build();
    }

    @Override
    public <T> HttpResponse<T> send(HttpRequest request, HttpResponse.BodyHandler<T> handler)
            throws IOException, InterruptedException {
        Probe probe = Probe.forCall();
        HttpResponse<T> response = delegate.send(withLane(request, probe), handler);
        collect(probe, response);
        return response;
    }

    @Override
    public <T> CompletableFuture<HttpResponse<T>> sendAsync(HttpRequest request, HttpResponse.BodyHandler<T> handler) {
        Probe probe = Probe.forCall();
        return delegate.sendAsync(withLane(request, probe), handler).thenApply(r -> collect(probe, r));
    }

    @Override
    public <T> CompletableFuture<HttpResponse<T>> sendAsync(HttpRequest request, HttpResponse.BodyHandler<T> handler,
            HttpResponse.PushPromiseHandler<T> pushPromiseHandler) {
        Probe probe = Probe.forCall();
        return delegate.sendAsync(withLane(request, probe), handler, pushPromiseHandler)
                .thenApply(r -> collect(probe, r));
    }

    private static <T> HttpResponse<T> collect(Probe probe, HttpResponse<T> response) {
        if (probe != null) {
            response.headers().firstValue(Probe.HOPS).ifPresent(probe::collect);
        }
        return response;
    }

    @Override
    public Optional<CookieHandler> cookieHandler() {
        return delegate.cookieHandler();
    }

    @Override
    public Optional<Duration> connectTimeout() {
        return delegate.connectTimeout();
    }

    @Override
    public Redirect followRedirects() {
        return delegate.followRedirects();
    }

    @Override
    public Optional<ProxySelector> proxy() {
        return delegate.proxy();
    }

    @Override
    public SSLContext sslContext() {
        return delegate.sslContext();
    }

    @Override
    public SSLParameters sslParameters() {
        return delegate.sslParameters();
    }

    @Override
    public Optional<Authenticator> authenticator() {
        return delegate.authenticator();
    }

    @Override
    public Version version() {
        return delegate.version();
    }

    @Override
    public Optional<Executor> executor() {
        return delegate.executor();
    }

    @Override
    public WebSocket.Builder newWebSocketBuilder() {
        return delegate.newWebSocketBuilder();
    }

    /** Java 21+: shuts the wrapped client down. */
    public void shutdown() {
        call(SHUTDOWN);
    }

    /** Java 21+: shuts the wrapped client down now. */
    public void shutdownNow() {
        call(SHUTDOWN_NOW);
    }

    /** Java 21+: closes the wrapped client. */
    public void close() {
        call(CLOSE);
    }

    /** Java 21+: whether the wrapped client has terminated; {@code false} before 21. */
    public boolean isTerminated() {
        if (IS_TERMINATED == null) {
            return false;
        }
        try {
            return (boolean) IS_TERMINATED.invoke(delegate);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }

    /** Java 21+: waits for the wrapped client to terminate; {@code false} before 21. */
    public boolean awaitTermination(Duration duration) throws InterruptedException {
        if (AWAIT_TERMINATION == null) {
            return false;
        }
        try {
            return (boolean) AWAIT_TERMINATION.invoke(delegate, duration);
        } catch (InterruptedException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public String toString() {
        return "LaneHttpClient(" + header + ", " + delegate + ")";
    }

    private void call(MethodHandle method) {
        if (method == null) {
            return;
        }
        try {
            method.invoke(delegate);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }

    private static MethodHandle lifecycle(String name, MethodType type) {
        try {
            return MethodHandles.publicLookup().findVirtual(HttpClient.class, name, type);
        } catch (NoSuchMethodException | IllegalAccessException e) {
            return null;
        }
    }
}

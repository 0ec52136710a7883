package io.laneway.lane.dubbo;

import java.util.HashMap;
import java.util.function.Function;

import org.apache.dubbo.common.URL;
import org.apache.dubbo.rpc.AsyncRpcResult;
import org.apache.dubbo.rpc.BaseFilter;
import org.apache.dubbo.rpc.Invocation;
import org.apache.dubbo.rpc.Invoker;
import org.apache.dubbo.rpc.Result;
import org.apache.dubbo.rpc.RpcInvocation;
import org.apache.dubbo.rpc.cluster.filter.support.ConsumerContextFilter;
import org.apache.dubbo.rpc.filter.ContextFilter;
import org.apache.dubbo.rpc.model.ApplicationModel;

/**
 * Dubbo's own context filters in front of laneway's, on real invocations: what a provider chain
 * and a consumer cluster chain do to attachments, without a network in between.
 */
final class Fixtures {
    static final String SERVICE = "io.laneway.test.Back";
    static final URL PROVIDER_URL = URL.valueOf("dubbo://127.0.0.1:20880/" + SERVICE);
    static final URL CONSUMER_URL = URL.valueOf("consumer://127.0.0.1/" + SERVICE + "?application=front");

    private static final ContextFilter CONTEXT = new ContextFilter(ApplicationModel.defaultModel());
    private static final ConsumerContextFilter CONSUMER_CONTEXT =
            new ConsumerContextFilter(ApplicationModel.defaultModel());
    private static final LaneProviderFilter PROVIDER = new LaneProviderFilter();
    private static final LaneConsumerFilter CONSUMER = new LaneConsumerFilter();

    private Fixtures() {}

    /** An invocation of {@code who()} as it arrives at a provider, with these attachments. */
    static RpcInvocation incoming(String... keyValues) {
        RpcInvocation inv = new RpcInvocation(null, "who", SERVICE, SERVICE, new Class<?>[0], new Object[0]);
        for (int i = 0; i < keyValues.length; i += 2) {
            inv.setAttachment(keyValues[i], keyValues[i + 1]);
        }
        return inv;
    }

    static RpcInvocation outgoing() {
        return new RpcInvocation(null, "who", SERVICE, SERVICE, new Class<?>[0], new Object[0]);
    }

    /** An invoker whose result is {@code body}'s value (or its exception). */
    static Invoker<Object> invoker(URL url, Function<Invocation, Object> body) {
        return invoker(Object.class, url,
                invocation -> AsyncRpcResult.newDefaultAsyncResult(body.apply(invocation), invocation));
    }

    /** An always available invoker of {@code type} at {@code url}, answering with {@code invoke}. */
    static <T> Invoker<T> invoker(Class<T> type, URL url, Function<Invocation, Result> invoke) {
        return new Invoker<>() {
            @Override
            public Class<T> getInterface() {
                return type;
            }

            @Override
            public Result invoke(Invocation invocation) {
                return invoke.apply(invocation);
            }

            @Override
            public URL getUrl() {
                return url;
            }

            @Override
            public boolean isAvailable() {
                return true;
            }

            @Override
            public void destroy() {}
        };
    }

    /** Serves {@code inv} as a provider chain does: ContextFilter, laneway's filter, the service. */
    static Result serve(RpcInvocation inv, Function<Invocation, Object> service) {
        return run(PROVIDER_URL, inv, invoker(PROVIDER_URL, service), CONTEXT, PROVIDER);
    }

    /** {@link #serve} with a service that answers with its own {@link Result}. */
    static Result serveResult(RpcInvocation inv, Function<Invocation, Result> service) {
        return run(PROVIDER_URL, inv, invoker(Object.class, PROVIDER_URL, service), CONTEXT, PROVIDER);
    }

    /** Calls out as a consumer cluster chain does: ConsumerContextFilter, laneway's, then the wire. */
    static Result call(RpcInvocation inv, Function<Invocation, Object> wire) {
        return call(CONSUMER_URL, inv, wire);
    }

    /** Calls out through a consumer chain to a provider chain that serves the call with {@code service}. */
    static Result callProvider(RpcInvocation out, Function<Invocation, Object> service) {
        return run(CONSUMER_URL, out, provider(service), CONSUMER_CONTEXT, CONSUMER);
    }

    /** The same through a consumer chain without laneway's filter (a plain client). */
    static Result callProviderPlain(RpcInvocation out, Function<Invocation, Object> service) {
        return run(CONSUMER_URL, out, provider(service), CONSUMER_CONTEXT);
    }

    // the wire and a provider chain behind it
    private static Invoker<Object> provider(Function<Invocation, Object> service) {
        return invoker(Object.class, CONSUMER_URL, sent -> {
            RpcInvocation arrived = outgoing();
            arrived.setObjectAttachments(new HashMap<>(sent.getObjectAttachments()));
            return serve(arrived, service);
        });
    }

    static Result call(URL consumerUrl, RpcInvocation inv, Function<Invocation, Object> wire) {
        return run(consumerUrl, inv, invoker(consumerUrl, wire), CONSUMER_CONTEXT, CONSUMER);
    }

    // like Dubbo's FilterChainBuilder: filters in order, listeners told when the result completes
    private static Result run(URL url, RpcInvocation inv, Invoker<Object> last, BaseFilter... filters) {
        Invoker<Object> next = last;
        for (int i = filters.length - 1; i >= 0; i--) {
            BaseFilter filter = filters[i];
            Invoker<Object> after = next;
            next = invoker(Object.class, url, invocation -> {
                Result result;
                try {
                    result = filter.invoke(after, invocation);
                } catch (RuntimeException e) {
                    if (filter instanceof BaseFilter.Listener) {
                        ((BaseFilter.Listener) filter).onError(e, after, invocation);
                    }
                    throw e;
                }
                if (filter instanceof BaseFilter.Listener) {
                    BaseFilter.Listener listener = (BaseFilter.Listener) filter;
                    return result.whenCompleteWithContext((r, t) -> {
                        if (t == null) {
                            listener.onResponse(r, after, invocation);
                        } else {
                            listener.onError(t, after, invocation);
                        }
                    });
                }
                return result;
            });
        }
        return next.invoke(inv);
    }
}
